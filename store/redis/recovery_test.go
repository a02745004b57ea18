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
	srv := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const id = "0123456789abcdef0123456789abcdef"
	now := time.Now().UnixMilli()
	claim := claimPart(store.ClaimRequest{ID: id, Route: "r", Operation: "r", Fingerprint: "fp", FingerprintRule: "", Token: "tok",
		Check: store.Check{Method: "GET", URL: "http://crm/x"}})
	result := [numResultFields]string{rReason: "upstream_5xx", rStatus: "502"}
	b := (&blob{state: stUnknown, attempts: 2, executions: 1, expires: now + 3600_000, startedAt: now, leaseUntil: now + 30_000,
		claim: claim, result: &result}).encode()
	// The old form: no "ndc", "ans" and "req" netstrings ("0:" each).
	claimLen, _ := digits(string(b[blobClaimLen:blobHeader]))
	end := blobHeader + int(claimLen)
	if string(b[end-6:end]) != "0:0:0:" {
		t.Fatalf("unexpected claim part end %q", b[end-6:end])
	}
	old := append(append([]byte{}, b[:end-6]...), b[end:]...)
	putDigits(old[blobClaimLen:blobHeader], claimLen-6)
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
