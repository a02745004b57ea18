package e2e

import (
	"net/http"
	"testing"
)

// TestKeyHeaderOneFieldLine: the Idempotency-Key header carries one key in
// one field line, a Structured Field string or a bare value without a
// comma (IETF Idempotency-Key draft). Two field lines, a list and a
// malformed Structured Field string are 400 key-invalid and nothing is
// forwarded or claimed; the gateway forwards the key as a Structured Field
// string.
func TestKeyHeaderOneFieldLine(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		up := newUpstream(t)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}", "{body.id}"]
`})
		const key = "evt_184"
		for _, tc := range []struct {
			name  string
			lines []string
		}{
			{"two field lines", []string{key, "evt_185"}},
			{"two equal field lines", []string{key, key}},
			{"comma in a bare key", []string{key + ",with,commas"}},
			{"unterminated Structured Field string", []string{`"` + key}},
		} {
			var headers []string
			for _, l := range tc.lines {
				headers = append(headers, "Idempotency-Key", l)
			}
			// The body's id would give a key: a bad header never falls
			// through to a later template.
			r := send(t, "POST", gw.url+"/deals", []byte(`{"id":"from-body"}`), headers...)
			if !isProblem(t, r, http.StatusBadRequest, "key-invalid", "") {
				t.Errorf("%s: %d %s %s, want 400 key-invalid", tc.name, r.status, r.header.Get("Content-Type"), r.body)
			}
		}
		if n := up.count("/deals"); n != 0 {
			t.Fatalf("refused keys reached the upstream %d times", n)
		}

		// The key itself was never claimed: sent properly it executes once,
		// and is forwarded as a Structured Field string.
		first := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", `"`+key+`"`)
		again := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", key)
		if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first proper request: %d replayed=%q %s", first.status, first.header.Get("Idempotent-Replayed"), first.body)
		}
		if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("the bare form of the same key: %d replayed=%q, want a replay", again.status, again.header.Get("Idempotent-Replayed"))
		}
		if n := up.count("/deals"); n != 1 {
			t.Errorf("upstream executions = %d, want 1", n)
		}
		if got, want := up.seenKey("/deals"), `"evt_184"`; got != want {
			t.Errorf("forwarded Idempotency-Key: %s, want the Structured Field string %s", got, want)
		}
	})
}
