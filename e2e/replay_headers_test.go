package e2e

import (
	"net/http"
	"testing"
)

// TestReplayHeadersAsFirst: a replay carries the headers the first answer
// carried (the README's promise), those that say who answered included:
// behind reverse_proxy the first answer has Caddy's Via and no Server of
// Caddy's, or the upstream's own Server. Only Date (the time of this
// answer), Content-Length (set from the stored body) and
// Idempotent-Replayed may differ. On every store.
func TestReplayHeadersAsFirst(t *testing.T) {
	t.Parallel()
	up := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/named" {
			w.Header().Set("Server", "crm/1.0")
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"D-1"}`))
	})
	const rules = `routes:
  - name: plain
    match: { path: /plain }
    key: ["{header.Idempotency-Key}"]
  - name: named
    match: { path: /named }
    key: ["{header.Idempotency-Key}"]
`
	forEachBackend(t, func(t *testing.T, be backend) {
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: rules})
		for _, path := range []string{"/plain", "/named"} {
			first := send(t, "POST", gw.url+path, []byte(`{}`), "Idempotency-Key", "hdr"+path)
			again := send(t, "POST", gw.url+path, []byte(`{}`), "Idempotency-Key", "hdr"+path)
			if first.status != http.StatusCreated || again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("%s: first %d, again %d %q: want 201 then a replayed 201", path, first.status, again.status, again.header.Get("Idempotent-Replayed"))
			}
			for _, h := range []http.Header{first.header, again.header} {
				h.Del("Date")
				h.Del("Idempotent-Replayed")
			}
			for name := range mergeNames(first.header, again.header) {
				if f, a := first.header.Values(name), again.header.Values(name); !equalValues(f, a) {
					t.Errorf("%s: %s is %q on the first answer, %q on the replay", path, name, f, a)
				}
			}
		}
	})
}

func mergeNames(hs ...http.Header) map[string]bool {
	names := map[string]bool{}
	for _, h := range hs {
		for name := range h {
			names[name] = true
		}
	}
	return names
}

func equalValues(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
