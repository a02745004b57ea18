package caddymodule

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/problem"
)

// TestDeepBodyRejected: a body nesting deeper than 128 levels is answered
// 400 body-too-deep and never forwarded, on a route that fingerprints the
// whole body and on one whose key reads a body field; a body at the limit
// goes through.
func TestDeepBodyRejected(t *testing.T) {
	t.Parallel()
	h, _ := newHandler(t, `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
  - name: hooks
    match: { path: /hooks }
    key: ["{body.event.id}"]
`, testStores[0].cfg(t))
	up := &counting{}
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	cases := []struct {
		name, path, body string
		want             int
	}{
		{"1 MB of [ on a header key", "/deals", strings.Repeat("[", 1<<20), http.StatusBadRequest},
		{"129 levels on a header key", "/deals", deep(keying.MaxDepth + 1), http.StatusBadRequest},
		{"129 levels on a body key", "/hooks", `{"event":{"id":"e1"},"x":` + deep(keying.MaxDepth) + `}`, http.StatusBadRequest},
		{"128 levels on a header key", "/deals", deep(keying.MaxDepth), http.StatusCreated},
		{"128 levels on a body key", "/hooks", `{"event":{"id":"e2"},"x":` + deep(keying.MaxDepth-1) + `}`, http.StatusCreated},
		{"brackets in a string", "/deals", `{"note":"` + strings.Repeat("[", 1<<16) + `"}`, http.StatusCreated},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := up.calls.Load()
			w := serve(h, up.next, "POST", tc.path, tc.body, "Idempotency-Key", "deep-"+strconv.Itoa(i))
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d: %.200s", w.Code, tc.want, w.Body)
			}
			want := int64(0)
			if tc.want == http.StatusCreated {
				want = 1
			} else {
				var p problem.Problem
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
					t.Fatalf("problem body %q: %v", w.Body, err)
				}
				if w.Header().Get("Content-Type") != "application/problem+json" || p.Type != problem.Base+"body-too-deep" ||
					!strings.Contains(p.Detail, "128") {
					t.Errorf("problem %+v, Content-Type %q; want type body-too-deep naming the limit", p, w.Header().Get("Content-Type"))
				}
			}
			if n := up.calls.Load() - before; n != want {
				t.Errorf("upstream calls = %d, want %d", n, want)
			}
		})
	}
}
