// Package storetest is the conformance suite of the store.Engine
// contract: every engine runs it (the embedded engine; Redis on a single
// node and on a Cluster; Postgres directly and through PgBouncer in
// transaction mode), and it is the definition of "behaves identically".
//
// An engine's test calls Run with a Harness that opens fresh, empty
// engines and reads the engine's clock and a record's remaining lifetime.
// The tests are grouped by what they cover, one file each: claims and
// their handle, completion and replay, refused arguments, expiry and the
// deployment secret (claims.go), tombstones and twin entries
// (retention.go), verification checks (check.go), operator actions
// (operator.go), "not done" executions and re-drives (recovery.go),
// listing (list.go), notices (notices.go) and tool calls (toolcall.go).
// The helpers the engines' own tests share (NewID, ClaimReq, MustClaim,
// MustGet, ...) are here too.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Harness is what the suite needs from an engine's test.
type Harness struct {
	// Open returns a new engine that holds no records; the harness closes
	// it when the test ends. The suite's tests run in parallel, each on
	// an engine of its own.
	Open func(t testing.TB) store.Engine
	// Now reads the engine's clock: the one it decides lease expiry and
	// TTLs by.
	Now func(t testing.TB, e store.Engine) time.Time
	// TTL is how long record id has left to live (0 or less when it does
	// not exist).
	TTL func(t testing.TB, e store.Engine, id string) time.Duration
	// Skip names the tests that do not apply to this engine yet, with the
	// reason, which the test reports as its skip message.
	Skip map[string]string
}

// test is one conformance test.
type test struct {
	name string
	run  func(t *testing.T, h Harness, e store.Engine)
}

var tests []test

// register adds tests to the suite (from each file's init).
func register(ts ...test) { tests = append(tests, ts...) }

// Run runs every conformance test against fresh engines from h.
func Run(t *testing.T, h Harness) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each test opens an engine of its own
			if why, ok := h.Skip[tc.name]; ok {
				t.Skip(why)
			}
			tc.run(t, h, h.Open(t))
		})
	}
}

var idSeq atomic.Int64

// NewID returns a record id shaped like keying.KeyID (32 hex characters).
func NewID(t testing.TB) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", t.Name(), idSeq.Add(1)))
	return hex.EncodeToString(sum[:])[:32]
}

func ClaimReq(id, token string) store.ClaimRequest {
	return store.ClaimRequest{
		ID:              id,
		Route:           "create_crm_deal",
		Operation:       "create_crm_deal",
		Fingerprint:     "fp-1",
		FingerprintRule: "body=amount,currency",
		Token:           token,
		Lease:           30 * time.Second,
		HoldTTL:         720 * time.Hour,
		OnExpired:       store.ExpiredHold,
	}
}

// complete stores res under the claim (id, token), as the handler does.
func complete(e store.Engine, id, token string, res store.Result, ttl time.Duration) (bool, error) {
	return e.Complete(context.Background(), Completion(id, token, res, ttl))
}

// Completion is the CompleteRequest of ClaimReq(id, token) with res.
func Completion(id, token string, res store.Result, ttl time.Duration) store.CompleteRequest {
	return store.CompleteRequest{Claim: ClaimReq(id, token), Result: res, TTL: ttl}
}

func MustClaim(t testing.TB, e store.Engine, req store.ClaimRequest) store.ClaimResult {
	t.Helper()
	res, err := e.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("Claim(%s, token %s): %v", req.ID, req.Token, err)
	}
	if res.Record == nil {
		t.Fatalf("Claim(%s): nil record", req.ID)
	}
	if (res.Claim != nil) != res.Claimed || res.Claim != nil && (res.Claim.ID() != req.ID || res.Claim.Fence() != res.Record.Fence()) {
		t.Fatalf("Claim(%s): claimed %v with the handle %+v; want a handle of this claim exactly when claimed", req.ID, res.Claimed, res.Claim)
	}
	return res
}

func MustGet(t testing.TB, e store.Engine, id string) *store.Record {
	t.Helper()
	r, err := e.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	if r == nil {
		t.Fatalf("Get(%s): no record", id)
	}
	return r
}

func MustOK(t testing.TB, what string, ok bool, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !ok {
		t.Fatalf("%s: false, want true", what)
	}
}

func MustLose(t testing.TB, what string, ok bool, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if ok {
		t.Fatalf("%s: true, want false (fenced out)", what)
	}
}

// WaitPast polls the engine's clock until it is past deadline.
func WaitPast(t testing.TB, h Harness, e store.Engine, deadline time.Time) {
	t.Helper()
	for range 3000 {
		if h.Now(t, e).After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the engine's clock never passed %v", deadline)
}

// CheckTTL asserts that the record's remaining lifetime is within
// (want-slack, want].
func CheckTTL(t testing.TB, h Harness, e store.Engine, id string, want time.Duration) {
	t.Helper()
	const slack = 5 * time.Second
	if got := h.TTL(t, e, id); got > want || got <= want-slack {
		t.Fatalf("TTL = %v, want within (%v, %v]", got, want-slack, want)
	}
}

func SampleResult() store.Result {
	body := []byte("{\"id\":\"deal_42\"}")
	sum := sha256.Sum256(body)
	return store.Result{
		Status:     201,
		Header:     http.Header{"Content-Type": {"application/json"}, "Location": {"/crm/deals/deal_42"}},
		Body:       body,
		Digest:     hex.EncodeToString(sum[:]),
		ExternalID: "deal_42",
	}
}
