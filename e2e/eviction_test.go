package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestEvictingRedisRefused: a gateway on a Redis with maxmemory-policy
// allkeys-lru does not start, with an error naming the policy; with
// allow_eviction it still does not start on the secret kept in Redis
// (which the policy may evict), and starts with a configured secret.
func TestEvictingRedisRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	up := newUpstream(t)
	for _, tc := range []struct {
		extra, want string
	}{
		{"", "maxmemory-policy allkeys-lru"},
		{"allow_eviction", "configure the secret option"},
	} {
		gw := writeGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: behaviourRules, extra: tc.extra})
		gw.run()
		done := make(chan error, 1)
		go func() { done <- gw.cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(gw.logs.String(), tc.want) {
				t.Errorf("%q: gateway exited with %v; log lacks %q:\n%s", tc.extra, err, tc.want, gw.logs.String())
			}
		case <-time.After(20 * time.Second):
			_ = gw.cmd.Process.Kill()
			t.Fatalf("%q: the gateway started on an evicting Redis", tc.extra)
		}
	}
	gw := startGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: behaviourRules, extra: withSecret("allow_eviction")})
	if r := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", "ev-1"); r.status != http.StatusCreated {
		t.Fatalf("with allow_eviction and a secret: %d %s", r.status, r.body)
	}
}
