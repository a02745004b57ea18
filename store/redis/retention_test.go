package redis

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestRetentionCommands counts with the server's own counters what
// tombstones and the same-payload detector add to an execute on a single
// node, inside its two scripts (no round trip of their own): the claim
// of a new key GETs the tombstone (only on a route that keeps them) and
// the twin entry (only with the detector on); the completion SETs both.
// A replay finds its record and reads neither.
func TestRetentionCommands(t *testing.T) {
	t.Parallel()
	e := openRedis(t)
	ctx := context.Background()
	admin := e.srv.Client(t)
	sent := &redistest.CommandLog{}
	e.s.Client().AddHook(sent)
	twin := storetest.NewID(t)
	plain := func(id string) store.ClaimRequest { return storetest.ClaimReq(id, store.NewToken()) }
	kept := func(id string) store.ClaimRequest {
		r := plain(id)
		r.Tombstone, r.Twin, r.TwinWindow = time.Hour, twin, time.Hour
		return r
	}
	for _, c := range []struct {
		name          string
		req           func(id string) store.ClaimRequest
		claim, finish map[string]int64 // commandstats of the claim, of the completion
	}{
		{"without", plain,
			map[string]int64{"evalsha": 1, "get": 1, "time": 1, "set": 1, "zadd": 1},
			map[string]int64{"evalsha": 1, "set": 1, "zrem": 1, "publish": 1}},
		{"tombstone and twin", kept,
			map[string]int64{"evalsha": 1, "get": 3, "time": 1, "set": 1, "zadd": 1},
			map[string]int64{"evalsha": 1, "set": 3, "zrem": 1, "publish": 1}},
	} {
		id := storetest.NewID(t)
		req := c.req(id)
		measure := func(what string, want map[string]int64, call func()) {
			t.Helper()
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			sent.Take()
			call()
			if got := sent.Take(); len(got) != 1 || got[0] != "evalsha" {
				t.Errorf("%s, %s: client sent %q, want one evalsha", c.name, what, got)
			}
			stats := redistest.CommandStats(t, admin)
			delete(stats, "config|resetstat")
			delete(stats, "info")
			if !maps.Equal(stats, want) {
				t.Errorf("%s, %s: commandstats %v, want %v", c.name, what, stats, want)
			}
		}
		var res store.ClaimResult
		measure("claim", c.claim, func() {
			var err error
			if res, err = e.s.Claim(ctx, req); err != nil || !res.Claimed {
				t.Fatalf("claim: %+v, %v", res, err)
			}
		})
		measure("complete", c.finish, func() {
			if ok, err := res.Claim.Complete(ctx, storetest.SampleResult()); !ok || err != nil {
				t.Fatalf("complete: %v, %v", ok, err)
			}
		})
		measure("replay", map[string]int64{"evalsha": 1, "get": 1, "setrange": 1}, func() {
			if r, err := e.s.Claim(ctx, c.req(id)); err != nil || r.Claimed {
				t.Fatalf("replay: %+v, %v", r, err)
			}
		})
	}
}
