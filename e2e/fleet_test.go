package e2e

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestFleetSharesOneRedis spreads 50 parallel duplicate deliveries across
// three gateway processes sharing one redis-server: one upstream execution,
// and every retry on any instance replays it.
func TestFleetSharesOneRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	up := newUpstream(t)
	var fleet []*gateway
	for range 3 {
		fleet = append(fleet, startGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: behaviourRules}))
	}
	const n = 50
	body := []byte(`{"title":"fleet"}`)
	results := make([]response, n)
	together(n, func(i int) {
		results[i] = send(t, "POST", fleet[i%len(fleet)].url+"/deals", body, "Idempotency-Key", "fleet-1")
	})
	if got := up.count("/deals"); got != 1 {
		t.Fatalf("upstream executions = %d across %d instances, want 1", got, len(fleet))
	}
	var first []byte
	for _, r := range results {
		switch r.status {
		case http.StatusCreated:
			first = r.body
		case http.StatusConflict:
		default:
			t.Errorf("status %d: %s", r.status, r.body)
		}
	}
	if first == nil {
		t.Fatal("no delivery got the upstream's answer")
	}
	for i, gw := range fleet {
		r := send(t, "POST", gw.url+"/deals", body, "Idempotency-Key", "fleet-1")
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, first) {
			t.Errorf("instance %d: %d replayed=%q %s", i, r.status, r.header.Get("Idempotent-Replayed"), r.body)
		}
	}
	if got := up.count("/deals"); got != 1 {
		t.Errorf("upstream executions after retries = %d, want 1", got)
	}
}
