package caddymodule

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestInFlightNamesKeySource: the 409 for a key still in flight says
// where the key came from. Keyed by the Idempotency-Key header it has the
// IETF draft's title; keyed by another template (a webhook's event id in
// the body) its title does not speak of an Idempotency-Key the request
// never sent, and its detail names the template the key came from.
func TestInFlightNamesKeySource(t *testing.T) {
	t.Parallel()
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			h, _ := newHandler(t, `
routes:
  - name: hook
    match: { path: /hook }
    key: ["{header.Idempotency-Key}", "{body.event.id}"]
`, st.cfg(t))
			arrived, release := make(chan struct{}, 2), make(chan struct{})
			held := func(w http.ResponseWriter, r *http.Request) error {
				arrived <- struct{}{}
				<-release
				w.WriteHeader(http.StatusCreated)
				return nil
			}
			firsts := make(chan *httptest.ResponseRecorder, 2)
			go func() { firsts <- serve(h, held, "POST", "/hook", `{"event":{"id":"evt_1"}}`) }()
			go func() { firsts <- serve(h, held, "POST", "/hook", `{}`, "Idempotency-Key", "k1") }()
			for range 2 {
				select {
				case <-arrived:
				case <-time.After(10 * time.Second):
					close(release)
					t.Fatal("the first requests did not reach the upstream")
				}
			}
			defer func() {
				close(release)
				for range 2 {
					<-firsts
				}
			}()

			for _, tt := range []struct {
				name          string
				body          string
				headers       []string
				title, detail string
			}{
				{"key from the body", `{"event":{"id":"evt_1"}}`, nil,
					"A request is outstanding for this key", "{body.event.id}"},
				{"key from the Idempotency-Key header", `{}`, []string{"Idempotency-Key", "k1"},
					"A request is outstanding for this Idempotency-Key", "Idempotency-Key header"},
			} {
				w := serve(h, held, "POST", "/hook", tt.body, tt.headers...)
				checkKeySource(t, tt.name, w, http.StatusConflict, "in-flight", tt.title, tt.detail)
			}
		})
	}
}

// TestKeyReusedNamesKeySource: the 422 for a key reused with another
// payload names where the key came from, as the 409 does: the draft's
// title only where the key is the Idempotency-Key header.
func TestKeyReusedNamesKeySource(t *testing.T) {
	t.Parallel()
	h, _ := newHandler(t, `
routes:
  - name: hook
    match: { path: /hook }
    key: ["{header.Idempotency-Key}", "{body.event.id}"]
`, testStores[0].cfg(t))
	done := func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusCreated)
		return nil
	}
	for _, tt := range []struct {
		name          string
		first, second string
		headers       []string
		title, detail string
	}{
		{"key from the body", `{"event":{"id":"evt_2"},"n":1}`, `{"event":{"id":"evt_2"},"n":2}`, nil,
			"The key is already used", "{body.event.id}"},
		{"key from the Idempotency-Key header", `{"n":1}`, `{"n":2}`, []string{"Idempotency-Key", "k2"},
			"Idempotency-Key is already used", "Idempotency-Key header"},
	} {
		if w := serve(h, done, "POST", "/hook", tt.first, tt.headers...); w.Code != http.StatusCreated {
			t.Fatalf("%s: first request %d %s", tt.name, w.Code, w.Body)
		}
		w := serve(h, done, "POST", "/hook", tt.second, tt.headers...)
		checkKeySource(t, tt.name, w, http.StatusUnprocessableEntity, "key-reused", tt.title, tt.detail)
	}
}

// checkKeySource checks that w is the problem typ with status, its title
// title and its detail naming where the key came from (detail).
func checkKeySource(t *testing.T, name string, w *httptest.ResponseRecorder, status int, typ, title, detail string) {
	t.Helper()
	var p struct{ Type, Title, Detail string }
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != status || !strings.HasSuffix(p.Type, "#"+typ) {
		t.Fatalf("%s: %d %s, want %d %s", name, w.Code, w.Body, status, typ)
	}
	if p.Title != title || !strings.Contains(p.Detail, detail) {
		t.Errorf("%s: title %q detail %q, want title %q and a detail naming %s", name, p.Title, p.Detail, title, detail)
	}
}
