package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestOneCommandPerCall proves with the server's own counters that every
// store call is one command from the client: EVALSHA for the scripted steps
// (no EVAL, no SCRIPT LOAD, no PING, no extra reads), HMGET for Get. Commands
// a script runs inside Redis (TIME, HMGET, HSET, ...) are counted by Redis
// too; they are not round trips, so they are only checked to be among those
// the scripts use.
func TestOneCommandPerCall(t *testing.T) {
	t.Parallel()
	e := openRedis(t)
	ctx := context.Background()
	admin := e.srv.Client(t) // INFO and CONFIG RESETSTAT go through here
	sent := &redistest.CommandLog{}
	e.s.Client().AddHook(sent)
	insideScripts := []string{"time", "get", "set", "setrange", "zadd", "zrem", "zremrangebyscore", "publish", "del"}

	id := storetest.NewID(t)
	steps := []struct {
		name string
		call func() error
		want string // the one command the client sends
	}{
		{"Claim (new)", func() error { _, err := e.s.Claim(ctx, storetest.ClaimReq(id, "tok")); return err }, "evalsha"},
		{"Claim (in flight)", func() error { _, err := e.s.Claim(ctx, storetest.ClaimReq(id, "tok2")); return err }, "evalsha"},
		{"Renew", func() error { _, err := e.s.Renew(ctx, id, "tok", time.Minute); return err }, "evalsha"},
		{"Complete", func() error {
			_, err := e.s.Complete(ctx, storetest.Completion(id, "tok", storetest.SampleResult(), time.Hour))
			return err
		}, "evalsha"},
		{"Claim (replay)", func() error { _, err := e.s.Claim(ctx, storetest.ClaimReq(id, "tok3")); return err }, "evalsha"},
		{"MarkUnknown", func() error { _, err := e.s.MarkUnknown(ctx, id, "tok", "x", time.Hour); return err }, "evalsha"},
		{"Release", func() error { _, err := e.s.Release(ctx, id, "tok", time.Hour); return err }, "evalsha"},
		{"Get", func() error { _, err := e.s.Get(ctx, id); return err }, "get"},
		{"OperatorComplete", func() error {
			_, err := e.s.OperatorComplete(ctx, id, storetest.SampleResult(), testAction, time.Hour)
			return err
		}, "evalsha"},
		{"OperatorRelease", func() error { _, err := e.s.OperatorRelease(ctx, id, testAction, time.Hour); return err }, "evalsha"},
		{"OperatorRelease (conflict)", func() error {
			if _, err := e.s.Claim(ctx, storetest.ClaimReq(id, "tok4")); err != nil {
				return err
			}
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				return err
			}
			sent.Take()
			_, err := e.s.OperatorRelease(ctx, id, testAction, time.Hour)
			if !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("err = %v, want ErrConflict", err)
			}
			return nil
		}, "evalsha"},
	}
	for _, st := range steps {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
		sent.Take()
		if err := st.call(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := sent.Take(); !slices.Equal(got, []string{st.want}) {
			t.Errorf("%s: client sent %q, want [%s]", st.name, got, st.want)
		}
		stats := redistest.CommandStats(t, admin)
		delete(stats, "config|resetstat")
		delete(stats, "info")
		if stats[st.want] < 1 {
			t.Errorf("%s: commandstats shows no %s: %v", st.name, st.want, stats)
		}
		if st.want == "evalsha" {
			if stats["evalsha"] != 1 || stats["eval"] != 0 {
				t.Errorf("%s: evalsha=%d eval=%d, want 1 and 0", st.name, stats["evalsha"], stats["eval"])
			}
			for cmd := range stats {
				if cmd != "evalsha" && !slices.Contains(insideScripts, cmd) {
					t.Errorf("%s: unexpected command %s in commandstats: %v", st.name, cmd, stats)
				}
			}
		} else if len(stats) != 1 || stats[st.want] != 1 {
			t.Errorf("%s: commandstats %v, want only %s=1", st.name, stats, st.want)
		}
	}
}

// TestScriptCacheFlushFallsBackToEval: after SCRIPT FLUSH the first call of
// a script costs EVALSHA (NOSCRIPT) + EVAL, and the store keeps working.
func TestScriptCacheFlushFallsBackToEval(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.s.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		sent := &redistest.CommandLog{}
		e.s.Client().AddHook(sent)
		res, err := e.s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok"))
		if err != nil || !res.Claimed {
			t.Fatalf("Claim after SCRIPT FLUSH: %+v, %v", res, err)
		}
		if got := sent.Take(); !slices.Equal(got, []string{"evalsha", "eval"}) {
			t.Fatalf("client sent %q, want [evalsha eval]", got)
		}
		if _, err := e.s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok")); err != nil {
			t.Fatal(err)
		}
		if got := sent.Take(); !slices.Equal(got, []string{"evalsha"}) {
			t.Fatalf("second claim sent %q, want [evalsha] (EVAL caches the script)", got)
		}
	})
}
