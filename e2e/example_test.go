package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exampleGateway runs the gateway on the repository's Caddyfile.example
// itself, with only its addresses, its rules file and its store replaced
// for the test: what the example says is what runs. A line the test
// expects and cannot find fails the test, so the example cannot drift
// away from what is tested. rules is a path; store is as for
// gatewayConfig.
// exampleConsoleHash is `idemgate hash-password --plaintext example-operator`.
const exampleConsoleHash = "$2a$14$hnLo7ucheLsl3m6uwD1d2evFmP8ml1b3VATlWo/y/6YaiXQX8Rvx."

func exampleGateway(t *testing.T, store, upstream, rules string, env ...string) *gateway {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t)
	// The console site's basic_auth needs a hash to start (make run makes
	// one per run); this one is of "example-operator".
	g.env = append([]string{"IDEMGATE_CONSOLE_HASH=" + exampleConsoleHash}, env...)
	if store == "embedded" {
		store = "embedded " + filepath.Join(g.dir, "store")
	}
	caddyfile := string(src)
	for _, r := range [][2]string{
		{"admin localhost:2019", fmt.Sprintf("admin 127.0.0.1:%d\n\tdefault_bind 127.0.0.1", g.adminPort)},
		{":8080 {", fmt.Sprintf(":%d {", g.port)},
		{":8443 {", fmt.Sprintf(":%d {", freePort(t))},
		{"rules examples/webhook/routes.yaml", "rules " + rules},
		{"store embedded {$IDEMGATE_STORE_DIR}\n", "store " + store + "\n"},
		{"reverse_proxy 127.0.0.1:9001", "reverse_proxy " + upstream},
	} {
		if n := strings.Count(caddyfile, r[0]); n != 1 {
			t.Fatalf("Caddyfile.example has %q %d times, want once", r[0], n)
		}
		caddyfile = strings.Replace(caddyfile, r[0], r[1], 1)
	}
	if err := os.WriteFile(g.caddyfile, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	g.start()
	t.Cleanup(g.stop)
	return g
}

// TestExampleLogsCarryNoKeys: with the log configuration of
// Caddyfile.example, Caddy's own logs (its error log when the upstream
// fails, the access log) carry neither the scope headers' values nor the
// key, however the upstream fails: it breaks the connection after taking
// the request, or cannot be reached at all.
func TestExampleLogsCarryNoKeys(t *testing.T) {
	t.Parallel()
	const (
		apiKey  = "sk_live_scope_4f1d9c27"
		bearer  = "Bearer tok_scope_77e0a1d3"
		keyA    = "key-secret-8a7b6c"
		keyB    = "key-secret-5d4e3f"
		keyDown = "key-secret-0f9e8d"
	)
	rules := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(rules, []byte(`
routes:
  - name: orders
    match: { path: /orders }
    key: ["{header.Idempotency-Key}"]
    scope: ["{header.X-Api-Key}"]
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	up := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		// Takes the request, then breaks the connection without an answer.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	})
	gw := exampleGateway(t, "embedded", up.addr(), rules)

	for _, req := range []struct{ path, key, header, value string }{
		{"/orders", keyA, "X-Api-Key", apiKey},
		{"/deals", keyB, "Authorization", bearer},
	} {
		r := send(t, "POST", gw.url+req.path, []byte(`{}`), "Idempotency-Key", req.key, req.header, req.value)
		if r.status != http.StatusBadGateway {
			t.Fatalf("%s: %d %s, want 502 from the broken upstream", req.path, r.status, r.body)
		}
	}
	up.srv.Close() // now the upstream cannot be reached at all
	if r := send(t, "POST", gw.url+"/orders", []byte(`{}`), "Idempotency-Key", keyDown, "X-Api-Key", apiKey); r.status != http.StatusBadGateway {
		t.Fatalf("unreachable upstream: %d %s, want 502", r.status, r.body)
	}
	gw.stop()

	logs := gw.logs.String()
	if n := strings.Count(logs, `"logger":"http.log.error`); n < 3 {
		t.Fatalf("Caddy's error log has %d entries, want one per failed request (3):\n%s", n, logs)
	}
	for _, secret := range []string{apiKey, strings.TrimPrefix(bearer, "Bearer "), keyA, keyB, keyDown} {
		if strings.Contains(logs, secret) {
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, secret) {
					t.Errorf("Caddy's log shows %q: %s", secret, line)
					break
				}
			}
		}
	}
	if !strings.Contains(logs, `"logger":"http.log.access`) {
		t.Errorf("no access log entries: the example's log directive is not in effect")
	}
}
