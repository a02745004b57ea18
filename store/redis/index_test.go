package redis

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
	goredis "github.com/redis/go-redis/v9"
)

// indexEntries returns, for every state index of id's shard that lists id,
// the entry's score.
func indexEntries(t testing.TB, s *Store, id string) map[store.State]int64 {
	t.Helper()
	got := map[store.State]int64{}
	for _, st := range []store.State{store.StateInFlight, store.StateUnknown, store.StateReleased} {
		score, err := s.Client().ZScore(context.Background(), s.IndexKey(Shard(id), st), id).Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			t.Fatalf("ZSCORE: %v", err)
		}
		got[st] = int64(score)
	}
	return got
}

// checkIndexed asserts that id is listed by exactly the index of want (by
// none when completed), with the record's expiry time (now + PTTL) as its
// score, and that the key's TTL is ttl.
func checkIndexed(t testing.TB, s *Store, id string, want store.State, ttl time.Duration) {
	t.Helper()
	got := indexEntries(t, s, id)
	if want == store.StateCompleted {
		if len(got) != 0 {
			t.Fatalf("completed record %s is in the indexes %v, want none", id, got)
		}
		storetest.CheckTTL(t, probe, s, id, ttl)
		if r := storetest.MustGet(t, s, id); r.State != want {
			t.Fatalf("record state %q, want %q", r.State, want)
		}
		return
	}
	score, ok := got[want]
	if !ok || len(got) != 1 {
		t.Fatalf("record %s is in the indexes %v, want only %s", id, got, want)
	}
	storetest.CheckTTL(t, probe, s, id, ttl)
	// The embedded server's PTTL moves in one-second steps: allow for that.
	const slack = 2 * time.Second
	expiry := redisNow(t, s).Add(pttl(t, s, id))
	if d := time.UnixMilli(score).Sub(expiry); d < -slack || d > slack {
		t.Fatalf("index score %v is %v away from the record's expiry %v", time.UnixMilli(score), d, expiry)
	}
	if r := storetest.MustGet(t, s, id); r.State != want {
		t.Fatalf("record state %q, indexed as %q", r.State, want)
	}
}

// TestIndexFollowsTransitions walks a record through every state change and
// checks after each step that exactly the new state's index lists it,
// scored with its expiry time.
func TestIndexFollowsTransitions(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		storetest.WalkTransitions(t, probe, e.s, func(t *testing.T, id string, want store.State, ttl time.Duration) {
			checkIndexed(t, e.s, id, want, ttl)
		})
	})
}

// sameShardIDs returns n fresh record ids that all have the given tag.
func sameShardIDs(t testing.TB, shard string, n int) []string {
	t.Helper()
	if Shard(shard) != shard {
		t.Fatalf("%q is not a tag", shard)
	}
	var ids []string
	for try := 0; len(ids) < n; try++ {
		if try > 1000*numShards*n {
			t.Fatalf("no ids with tag %s", shard)
		}
		if id := storetest.NewID(t); Shard(id) == shard {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestExpiredRecordsLeaveTheIndex: a record whose key expired is no longer
// listed, and the next write to its index trims it.
func TestExpiredRecordsLeaveTheIndex(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ids := sameShardIDs(t, "7ab", 2)
		short, long := ids[0], ids[1]
		storetest.MustClaim(t, e.s, storetest.ClaimReq(short, "tok"))
		ok, err := e.s.Release(ctx, short, "tok", 50*time.Millisecond)
		storetest.MustOK(t, "Release", ok, err)
		released := store.ListFilter{State: store.StateReleased}
		if got := storetest.ListAll(t, e.s, released); !slices.Equal(got, []string{short}) {
			t.Fatalf("released records %q, want [%s]", got, short)
		}
		storetest.WaitPast(t, probe, e.s, redisNow(t, e.s).Add(60*time.Millisecond))
		// Listing goes by the index score, not by the key's actual expiry
		// (which miniredis applies up to a second late).
		if got := storetest.ListAll(t, e.s, released); len(got) != 0 {
			t.Fatalf("expired record still listed: %q", got)
		}
		if _, ok := indexEntries(t, e.s, short)[store.StateReleased]; !ok {
			t.Fatal("the expired entry left the index before any write trimmed it (test assumption broken)")
		}
		storetest.MustClaim(t, e.s, storetest.ClaimReq(long, "tok"))
		ok, err = e.s.Release(ctx, long, "tok", time.Hour)
		storetest.MustOK(t, "Release", ok, err)
		if got := indexEntries(t, e.s, short); len(got) != 0 {
			t.Fatalf("the write to the released index did not trim the expired entry: %v", got)
		}
		if got := storetest.ListAll(t, e.s, released); !slices.Equal(got, []string{long}) {
			t.Fatalf("released records %q, want [%s]", got, long)
		}
	})
}

// TestShard: hex ids take their first three characters as their tag,
// other ids fold onto hex digits, and idFromKey accepts only a record key
// whose tag is its id's.
func TestShard(t *testing.T) {
	for id, want := range map[string]string{
		"0abc": "0ab", "9f0": "9f0", "a1": "a10", "f0f0": "f0f", "": "000",
		"A": "100", "Z_1": "af1", "_x": "f80", "-y": "d90", "zzz": "aaa", "ab-": "abd",
	} {
		if got := Shard(id); got != want {
			t.Errorf("Shard(%q) = %q, want %q", id, got, want)
		}
	}
	for n := range numShards {
		if got := shardOf(tagOf(n)); got != n {
			t.Fatalf("shardOf(tagOf(%d)) = %d", n, got)
		}
	}
	s := New(nil, "", 0)
	for key, want := range map[string]string{
		"idemgate:{a1b}a1b2":               "a1b2",
		"idemgate:{100}ABC":                "",
		"idemgate:{123}ABC":                "ABC",
		"idemgate:{a10}a1":                 "a1",
		"idemgate:{b00}a1":                 "",
		"idemgate:{a1b}:idx:in_flight":     "",
		"idemgate:{a1b}":                   "",
		"idemgate:{a}a":                    "",
		"other:{a1b}a1b2":                  "",
		"idemgate:{0123456789abcdef01234}": "",
	} {
		got, ok := s.idFromKey(key)
		if ok != (want != "") || got != want && ok {
			t.Errorf("idFromKey(%q) = %q, %v; want %q", key, got, ok, want)
		}
	}
}
