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
// of a new key reads the tombstone with its record in one MGET (only on
// a route that keeps them) and GETs the twin entry (only with the
// detector on); the completion SETs both, and publishes no notice, since
// nobody waits (TestNoticesOnlyForWaiters). A replay reads the tombstone
// with its record, in the same one command.
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
			map[string]int64{"evalsha": 1, "set": 1, "zrem": 1}},
		{"tombstone and twin", kept,
			map[string]int64{"evalsha": 1, "mget": 1, "get": 1, "time": 1, "set": 1, "zadd": 1},
			map[string]int64{"evalsha": 1, "set": 3, "zrem": 1}},
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
		replay := map[string]int64{"evalsha": 1, "get": 1, "setrange": 1}
		if c.name != "without" {
			replay = map[string]int64{"evalsha": 1, "mget": 1, "setrange": 1}
		}
		measure("replay", replay, func() {
			if r, err := e.s.Claim(ctx, c.req(id)); err != nil || r.Claimed {
				t.Fatalf("replay: %+v, %v", r, err)
			}
		})
	}
}

// TestNoticesOnlyForWaiters: a completion publishes a notice when a
// duplicate found its record in flight (the claim marks the record in
// the SETRANGE that counts its attempt), or while this gateway's own
// waiters need notices; otherwise none.
func TestNoticesOnlyForWaiters(t *testing.T) {
	t.Parallel()
	e := openRedis(t)
	ctx := context.Background()
	admin := e.srv.Client(t)
	publishes := func(what string, dup, need bool) int64 {
		t.Helper()
		id := storetest.NewID(t)
		res, err := e.s.Claim(ctx, storetest.ClaimReq(id, "tok-1"))
		if err != nil || !res.Claimed {
			t.Fatalf("%s: claim: %+v, %v", what, res, err)
		}
		if dup {
			d, err := e.s.Claim(ctx, storetest.ClaimReq(id, "tok-2"))
			if err != nil || d.Claimed || d.Record.State != store.StateInFlight || d.Record.Attempts != 2 {
				t.Fatalf("%s: duplicate: %+v, %v", what, d, err)
			}
			if r, err := e.s.Get(ctx, id); err != nil || r.Attempts != 2 || r.State != store.StateInFlight {
				t.Fatalf("%s: the marked record reads %+v, %v", what, r, err)
			}
		}
		if need {
			defer e.s.Notices().Need()()
		}
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if ok, err := res.Claim.Complete(ctx, storetest.SampleResult()); !ok || err != nil {
			t.Fatalf("%s: complete: %v, %v", what, ok, err)
		}
		return redistest.CommandStats(t, admin)["publish"]
	}
	if n := publishes("nobody waits", false, false); n != 0 {
		t.Errorf("nobody waits: %d PUBLISH, want none", n)
	}
	if n := publishes("a duplicate found it in flight", true, false); n != 1 {
		t.Errorf("a duplicate found it in flight: %d PUBLISH, want 1", n)
	}
	if n := publishes("a waiter of this gateway needs notices", false, true); n != 1 {
		t.Errorf("a waiter of this gateway needs notices: %d PUBLISH, want 1", n)
	}
}
