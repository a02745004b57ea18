package caddymodule

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/redis"
)

// TestLeaseDecisionsUseRedisClock: the gateway never compares a lease with
// its own clock. The Redis server (a miniredis, whose clock the test sets)
// runs an hour ahead of and then an hour behind this process; two gateway
// instances (two handlers sharing the store, one of them with an older
// fingerprint rule) give the same answers in both cases, the ones the Redis
// clock calls for: the Retry-After of an in-flight conflict counts down the
// lease on the Redis clock, and a record whose lease ran out on the Redis
// clock is taken over exactly then, also when it was made under the older
// rule (the handler's own expiry check).
func TestLeaseDecisionsUseRedisClock(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run("redis "+skew.String(), func(t *testing.T) {
			m := miniredis.NewMiniRedis()
			if err := m.StartAddr("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			sc := &redis.Module{Addresses: []string{"redis://" + m.Addr()}}
			const common = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    lock_lease: 10s
    on_unknown_outcome: release
`
			older, _ := newHandler(t, common+"    fingerprint: { body: [amount] }\n", sc)
			newer, _ := newHandler(t, common, sc)
			instances := map[string]*Handler{"older rule": older, "newer rule": newer}
			up := &counting{}
			body := `{"amount":5,"note":"first"}`

			// A claim by a gateway that then died, made under the older
			// rule, at Redis time base.
			base := time.Now().Add(skew).Truncate(time.Millisecond)
			m.SetTime(base)
			rt := older.routes[0]
			in := keying.NewInput("POST", http.Header{}, "", []byte(body))
			fp, err := keying.Fingerprint("POST", rt.Operation, in, rt.Fingerprint)
			if err != nil {
				t.Fatal(err)
			}
			id := older.ids.KeyID(rt.Operation, keying.ScopeHash(rt.Scope, in), "k1")
			dead, err := older.gate.Store.Claim(context.Background(), store.ClaimRequest{
				ID: id, Route: rt.Name, Operation: rt.Operation, Fingerprint: fp, FingerprintRule: rt.FPRule,
				Token: store.NewToken(), Lease: rt.LockLease, HoldTTL: rt.HoldTTL, OnExpired: store.ExpiredRelease,
			})
			if err != nil || !dead.Claimed {
				t.Fatalf("claim: %+v, %v", dead, err)
			}

			// 4s into the lease on the Redis clock: both instances say
			// "in flight, retry in 6s".
			m.SetTime(base.Add(4 * time.Second))
			for name, h := range instances {
				w := serve(h, up.next, "POST", "/deals", body, "Idempotency-Key", "k1")
				if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "#in-flight") || w.Header().Get("Retry-After") != "6" {
					t.Fatalf("%s, 4s into the lease: %d Retry-After %q %s; want 409 in-flight, Retry-After 6",
						name, w.Code, w.Header().Get("Retry-After"), w.Body)
				}
			}

			// The lease has run out on the Redis clock (this process's
			// clock is an hour away from it): the instance with the newer
			// rule sees that the record is claimable under the older rule
			// and takes it over; the other instance replays the result.
			m.SetTime(base.Add(10 * time.Second))
			if w := serve(newer, up.next, "POST", "/deals", body, "Idempotency-Key", "k1"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
				t.Fatalf("newer rule, lease over: %d %s, want the takeover to execute (201)", w.Code, w.Body)
			}
			if w := serve(older, up.next, "POST", "/deals", body, "Idempotency-Key", "k1"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("older rule afterwards: %d %s, want a replay", w.Code, w.Body)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream executions = %d, want 1", n)
			}
			rec, err := older.gate.Store.Get(context.Background(), id)
			if err != nil || rec.State != store.StateCompleted || rec.Executions != 2 {
				t.Fatalf("record: %+v, %v; want completed after 2 executions (the dead claim and the takeover)", rec, err)
			}
		})
	}
}
