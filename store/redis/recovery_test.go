package redis

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
)

// TestRecordWithoutRecoveryFields: a record written before the recovery
// fields (its claim part three netstrings shorter) still reads, in Go and
// in the scripts, and a script that rewrites it keeps its result part in
// place.
func TestRecordWithoutRecoveryFields(t *testing.T) {
	s := openRecoveryStore(t)
	ctx := context.Background()
	const id = "0123456789abcdef0123456789abcdef"
	now := time.Now().UnixMilli()
	claim := claimPart(store.ClaimRequest{ID: id, Route: "r", Operation: "r", Fingerprint: "fp", FingerprintRule: "", Token: "tok",
		Check: store.Check{Method: "GET", URL: "http://crm/x"}})
	result := [numResultFields]string{rReason: "upstream_5xx", rStatus: "502"}
	b := (&blob{state: stUnknown, attempts: 2, executions: 1, expires: now + 3600_000, startedAt: now, leaseUntil: now + 30_000,
		claim: claim, result: &result}).encode()
	// The old form: no "ndc", "ans", "req" and "ndu" netstrings ("0:" each).
	old := withoutClaimTail(t, b, "0:0:0:0:")
	if err := s.Client().Set(ctx, s.Key(id), old, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}

	check := func(what string) {
		t.Helper()
		r, err := s.Get(ctx, id)
		if err != nil || r == nil {
			t.Fatalf("%s: Get: %v", what, err)
		}
		if r.State != store.StateUnknown || r.Reason != "upstream_5xx" || r.Status != 502 || r.Route != "r" || r.NotDone != 0 || r.Request != nil {
			t.Fatalf("%s: record %+v", what, r)
		}
	}
	check("as written")
	// begin check decodes and saves the record in the script.
	if _, ok, err := s.BeginCheck(ctx, id, "tok", "check-1", time.Second, false); err != nil || !ok {
		t.Fatalf("BeginCheck: %v %v", ok, err)
	}
	check("after a script rewrote it")
}

// withoutClaimTail is blob b with its claim part's last netstrings,
// tail, cut off: the form of an earlier version.
func withoutClaimTail(t *testing.T, b []byte, tail string) []byte {
	t.Helper()
	claimLen, _ := digits(string(b[blobClaimLen:blobHeader]))
	end := blobHeader + int(claimLen)
	if string(b[end-len(tail):end]) != tail {
		t.Fatalf("unexpected claim part end %q", b[end-len(tail):end])
	}
	old := append(append([]byte{}, b[:end-len(tail)]...), b[end:]...)
	putDigits(old[blobClaimLen:blobHeader], claimLen-int64(len(tail)))
	return old
}

// TestRecordWithoutUnknowns: a record written before unknown outcomes
// counted against the budget (no "ndu" netstring) reads with Unknowns 0
// and its recovery fields intact, and the not-done script counts on from
// there.
func TestRecordWithoutUnknowns(t *testing.T) {
	s := openRecoveryStore(t)
	ctx := context.Background()
	const id = "0123456789abcdef0123456789abcdee"
	now := time.Now().UnixMilli()
	claim := claimPart(store.ClaimRequest{ID: id, Route: "r", Operation: "r", Fingerprint: "fp", Token: "tok", Request: []byte("sealed")})
	claim[cNotDone] = "1"
	b := (&blob{state: stInFlight, attempts: 2, executions: 2, expires: now + 3600_000, startedAt: now, leaseUntil: now + 30_000,
		claim: claim}).encode()
	if err := s.Client().Set(ctx, s.Key(id), withoutClaimTail(t, b, "0:"), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, id); err != nil || r.Unknowns != 0 || r.NotDone != 1 || string(r.Request) != "sealed" {
		t.Fatalf("as written: %v, %+v", err, r)
	}
	out, err := s.NotDone(ctx, store.NotDoneRequest{ID: id, Token: "tok", Status: 502, Unknown: true})
	if err != nil || out != store.NotDoneReleased {
		t.Fatalf("NotDone: %v %v", out, err)
	}
	if r, err := s.Get(ctx, id); err != nil || r.Unknowns != 1 || r.NotDone != 2 || string(r.Request) != "sealed" || r.Reason != store.ReasonUnknownReleased {
		t.Fatalf("after the script: %v, %+v", err, r)
	}
}

// openRecoveryStore is a store on a Redis of its own, closed when the
// test ends.
func openRecoveryStore(t *testing.T) *Store {
	t.Helper()
	srv := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
