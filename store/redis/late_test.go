package redis

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestLateClaimRefused: a claim whose command reaches Redis after its
// caller's deadline (a stalled Redis ran it late) changes nothing, so it
// cannot hold a key for a request that was already answered.
func TestLateClaimRefused(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := storetest.NewID(t)
		past := redisNow(t, e.s).Add(-time.Second).UnixMilli()
		b := blob{state: stInFlight, attempts: 1, executions: 1, claim: claimPart(storetest.ClaimReq(id, "tok"))}
		v, err := e.s.run(ctx, "claim", id, claimScript, e.s.keys(id),
			id, "tok", b.encode(), past, ms(time.Hour), "hold", ms(30*time.Second)).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := v[0].(int64); code != codeLate || len(v) != 2 {
			t.Fatalf("late claim reply = %v, want {late, now}", v)
		}
		if r, err := e.s.Get(ctx, id); err != nil || r != nil {
			t.Fatalf("late claim left a record: %+v, %v", r, err)
		}
	})
}

// TestClaimLearnsRedisClock: claims teach the store the Redis clock; when
// the Redis clock jumps (here: the store believes it is an hour behind),
// the refused try changes nothing and Claim tries once more on the
// corrected clock.
func TestClaimLearnsRedisClock(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		storetest.MustClaim(t, e.s, storetest.ClaimReq(storetest.NewID(t), store.NewToken()))
		if !e.s.clockKnown.Load() {
			t.Fatal("the store did not learn the Redis clock from a claim reply")
		}
		if off := time.Duration(e.s.clockOffset.Load()) * time.Millisecond; off > time.Second || off < -time.Second {
			t.Errorf("learnt clock offset %v on one machine, want about 0", off)
		}
		e.s.clockOffset.Store(-time.Hour.Milliseconds())
		id := storetest.NewID(t)
		res := storetest.MustClaim(t, e.s, storetest.ClaimReq(id, store.NewToken()))
		if !res.Claimed || res.Record.Attempts != 1 || res.Record.Executions != 1 {
			t.Errorf("claim after a clock jump: claimed=%v attempts=%d executions=%d, want one fresh claim",
				res.Claimed, res.Record.Attempts, res.Record.Executions)
		}
		if off := time.Duration(e.s.clockOffset.Load()) * time.Millisecond; off > time.Second || off < -time.Second {
			t.Errorf("offset after the refusal %v, want corrected to about 0", off)
		}
	})
}
