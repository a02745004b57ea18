package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// env is one store under test plus the means to break its Redis.
type env struct {
	s    *Store
	srv  *redistest.Server // nil for the embedded backend
	stop func()            // make Redis unreachable
}

type backend struct {
	name string
	open func(t testing.TB) *env
}

var backends = []backend{
	{"redis", openRedis},
	{"embedded", openEmbedded},
}

func openRedis(t testing.TB) *env {
	t.Helper()
	srv := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{srv.Addr}, OpTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &env{s: s, srv: srv, stop: srv.Stop}
}

func openEmbedded(t testing.TB) *env {
	t.Helper()
	s, err := OpenEmbedded(Options{OpTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("OpenEmbedded: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &env{s: s, stop: s.embedded.Close}
}

// eachBackend runs f against a fresh store of every backend.
func eachBackend(t *testing.T, f func(t *testing.T, e *env)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			f(t, b.open(t))
		})
	}
}

var idSeq atomic.Int64

// newID returns a record id shaped like keying.KeyID (32 hex characters).
func newID(t testing.TB) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", t.Name(), idSeq.Add(1)))
	return hex.EncodeToString(sum[:])[:32]
}

func claimReq(id, token string) ClaimRequest {
	return ClaimRequest{
		ID:              id,
		Route:           "create_crm_deal",
		Operation:       "create_crm_deal",
		Fingerprint:     "fp-1",
		FingerprintRule: "body=amount,currency",
		Token:           token,
		Lease:           30 * time.Second,
		HoldTTL:         720 * time.Hour,
		OnExpired:       "hold",
	}
}

func mustClaim(t testing.TB, s *Store, req ClaimRequest) ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("Claim(%s, token %s): %v", req.ID, req.Token, err)
	}
	if res.Record == nil {
		t.Fatalf("Claim(%s): nil record", req.ID)
	}
	return res
}

func mustGet(t testing.TB, s *Store, id string) *Record {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	if r == nil {
		t.Fatalf("Get(%s): no record", id)
	}
	return r
}

func mustOK(t testing.TB, what string, ok bool, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !ok {
		t.Fatalf("%s: false, want true", what)
	}
}

func mustLose(t testing.TB, what string, ok bool, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if ok {
		t.Fatalf("%s: true, want false (fenced out)", what)
	}
}

// redisNow is the Redis server's clock.
func redisNow(t testing.TB, s *Store) time.Time {
	t.Helper()
	now, err := s.Client().Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

// waitPast polls the Redis clock until it is past deadline.
func waitPast(t testing.TB, s *Store, deadline time.Time) {
	t.Helper()
	for range 3000 {
		if redisNow(t, s).After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("Redis clock never passed %v", deadline)
}

func pttl(t testing.TB, s *Store, id string) time.Duration {
	t.Helper()
	d, err := s.Client().PTTL(context.Background(), s.Key(id)).Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	return d
}

// checkTTL asserts that the key's TTL is within (want-slack, want].
func checkTTL(t testing.TB, s *Store, id string, want time.Duration) {
	t.Helper()
	const slack = 5 * time.Second
	if got := pttl(t, s, id); got > want || got <= want-slack {
		t.Fatalf("PTTL = %v, want within (%v, %v]", got, want-slack, want)
	}
}

func sampleResult() Result {
	body := []byte("{\"id\":\"deal_42\"}")
	sum := sha256.Sum256(body)
	return Result{
		Status:     201,
		Header:     http.Header{"Content-Type": {"application/json"}, "Location": {"/crm/deals/deal_42"}},
		Body:       body,
		Digest:     hex.EncodeToString(sum[:]),
		ExternalID: "deal_42",
	}
}

func TestClaimCompleteReplay(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		before := redisNow(t, e.s)

		first := mustClaim(t, e.s, claimReq(id, "tok-A"))
		r := first.Record
		if !first.Claimed || first.TakeOver {
			t.Fatalf("first claim: Claimed=%v TakeOver=%v, want true,false", first.Claimed, first.TakeOver)
		}
		if r.State != StateInFlight || r.Token != "tok-A" || r.Attempts != 1 || r.Executions != 1 {
			t.Fatalf("first claim record: %+v", r)
		}
		if r.ID != id || r.Route != "create_crm_deal" || r.Operation != "create_crm_deal" ||
			r.Fingerprint != "fp-1" || r.FingerprintRule != "body=amount,currency" {
			t.Fatalf("identity fields not stored: %+v", r)
		}
		if r.StartedAt.Before(before.Truncate(time.Millisecond)) || !r.LeaseUntil.Equal(r.StartedAt.Add(30*time.Second)) {
			t.Fatalf("StartedAt %v LeaseUntil %v (Redis clock before claim %v)", r.StartedAt, r.LeaseUntil, before)
		}

		dup := mustClaim(t, e.s, claimReq(id, "tok-B"))
		if dup.Claimed || dup.Record.State != StateInFlight || dup.Record.Token != "tok-A" || dup.Record.Attempts != 2 {
			t.Fatalf("concurrent duplicate: Claimed=%v record %+v", dup.Claimed, dup.Record)
		}

		want := sampleResult()
		ok, err := e.s.Complete(ctx, completion(id, "tok-A", want, time.Hour))
		mustOK(t, "Complete", ok, err)

		replay := mustClaim(t, e.s, claimReq(id, "tok-C"))
		r = replay.Record
		if replay.Claimed || replay.TakeOver {
			t.Fatalf("replay claim: Claimed=%v TakeOver=%v", replay.Claimed, replay.TakeOver)
		}
		if r.State != StateCompleted || r.Status != 201 || !bytes.Equal(r.Body, want.Body) ||
			!reflect.DeepEqual(r.Header, want.Header) || r.Digest != want.Digest || r.ExternalID != "deal_42" ||
			r.BodyOmitted || r.Attempts != 3 || r.Executions != 1 || r.Token != "tok-A" {
			t.Fatalf("replayed record: %+v", r)
		}
		if r.CompletedAt.Before(r.StartedAt) {
			t.Fatalf("CompletedAt %v before StartedAt %v", r.CompletedAt, r.StartedAt)
		}

		got := mustGet(t, e.s, id)
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("Get differs from the claim's record:\n got %+v\nwant %+v", got, r)
		}
		if rec, err := e.s.Get(ctx, newID(t)); rec != nil || err != nil {
			t.Fatalf("Get(absent) = %v, %v; want nil, nil", rec, err)
		}
	})
}

func TestClaimRetriedWithSameToken(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		id := newID(t)
		mustClaim(t, e.s, claimReq(id, "tok-A"))
		again := mustClaim(t, e.s, claimReq(id, "tok-A"))
		if !again.Claimed || again.TakeOver || again.Record.Attempts != 1 || again.Record.Executions != 1 {
			t.Fatalf("retried claim: Claimed=%v TakeOver=%v record %+v", again.Claimed, again.TakeOver, again.Record)
		}
	})
}

func TestClaimRace(t *testing.T) {
	const n = 50
	eachBackend(t, func(t *testing.T, e *env) {
		id := newID(t)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results = make([]ClaimResult, n)
			errs    = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = e.s.Claim(context.Background(), claimReq(id, fmt.Sprintf("tok-%02d", i)))
			})
		}
		close(start)
		wg.Wait()
		winner := ""
		for i, res := range results {
			if errs[i] != nil {
				t.Fatalf("claim %d: %v", i, errs[i])
			}
			if res.Claimed {
				if winner != "" {
					t.Fatalf("two winners: %s and tok-%02d", winner, i)
				}
				winner = fmt.Sprintf("tok-%02d", i)
				continue
			}
			if res.Record.State != StateInFlight {
				t.Fatalf("loser %d sees state %q, want in_flight", i, res.Record.State)
			}
		}
		if winner == "" {
			t.Fatal("nobody claimed")
		}
		for i, res := range results {
			if !res.Claimed && res.Record.Token != winner {
				t.Fatalf("loser %d sees token %q, want the winner's %q", i, res.Record.Token, winner)
			}
		}
		r := mustGet(t, e.s, id)
		if r.Attempts != n || r.Executions != 1 || r.Token != winner {
			t.Fatalf("after the race: attempts %d executions %d token %q; want %d, 1, %q", r.Attempts, r.Executions, r.Token, n, winner)
		}
	})
}

func TestFencingAfterTakeOver(t *testing.T) {
	ops := []struct {
		name string
		call func(s *Store, id, token string) (bool, error)
	}{
		{"Renew", func(s *Store, id, tok string) (bool, error) {
			return s.Renew(context.Background(), id, tok, time.Minute)
		}},
		{"Complete", func(s *Store, id, tok string) (bool, error) {
			return s.Complete(context.Background(), completion(id, tok, sampleResult(), time.Hour))
		}},
		{"Release", func(s *Store, id, tok string) (bool, error) {
			return s.Release(context.Background(), id, tok, time.Hour)
		}},
		{"MarkUnknown", func(s *Store, id, tok string) (bool, error) {
			return s.MarkUnknown(context.Background(), id, tok, "upstream_timeout", time.Hour)
		}},
	}
	eachBackend(t, func(t *testing.T, e *env) {
		for _, op := range ops {
			t.Run(op.name, func(t *testing.T) {
				id := newID(t)
				req := claimReq(id, "tok-old")
				req.Lease = 300 * time.Millisecond
				req.OnExpired = "release"
				old := mustClaim(t, e.s, req)
				waitPast(t, e.s, old.Record.LeaseUntil)

				req.Token = "tok-new"
				req.Lease = time.Minute
				taken := mustClaim(t, e.s, req)
				if !taken.Claimed || !taken.TakeOver || taken.Record.Token != "tok-new" || taken.Record.Executions != 2 {
					t.Fatalf("takeover: Claimed=%v TakeOver=%v record %+v", taken.Claimed, taken.TakeOver, taken.Record)
				}

				ok, err := op.call(e.s, id, "tok-old")
				mustLose(t, op.name+" with the stale token", ok, err)
				if r := mustGet(t, e.s, id); !reflect.DeepEqual(r, taken.Record) {
					t.Fatalf("stale %s changed the record:\n got %+v\nwant %+v", op.name, r, taken.Record)
				}
				ok, err = op.call(e.s, id, "tok-new")
				mustOK(t, op.name+" with the current token", ok, err)
			})
		}
	})
}

// TestFencedCallsOnAbsentRecord: fenced calls on a record that does not
// exist change nothing (Complete is the exception: it writes a known result
// whose claim was lost, see TestCompleteWritesLostRecord).
func TestFencedCallsOnAbsentRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		ok, err := e.s.Renew(ctx, id, "tok", time.Second)
		mustLose(t, "Renew", ok, err)
		ok, err = e.s.Release(ctx, id, "tok", time.Hour)
		mustLose(t, "Release", ok, err)
		ok, err = e.s.MarkUnknown(ctx, id, "tok", "x", time.Hour)
		mustLose(t, "MarkUnknown", ok, err)
		if n, err := e.s.Client().Exists(ctx, e.s.Key(id)).Result(); err != nil || n != 0 {
			t.Fatalf("a fenced call created the key: %d, %v", n, err)
		}
	})
}

func TestLeaseExpiry(t *testing.T) {
	cases := []struct {
		name        string
		onExpired   string
		fingerprint string
		wantClaimed bool
		wantState   State
		wantReason  string
		wantExe     int64
	}{
		{"hold", "hold", "fp-1", false, StateUnknown, "lease_expired", 1},
		{"default is hold", "", "fp-1", false, StateUnknown, "lease_expired", 1},
		{"store holds too", "store", "fp-1", false, StateUnknown, "lease_expired", 1},
		{"hold whatever the fingerprint", "hold", "fp-other", false, StateUnknown, "lease_expired", 1},
		{"release takes over", "release", "fp-1", true, StateInFlight, "", 2},
		{"release never for another fingerprint", "release", "fp-other", false, StateInFlight, "", 1},
	}
	eachBackend(t, func(t *testing.T, e *env) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				id := newID(t)
				req := claimReq(id, "tok-A")
				req.Lease = 300 * time.Millisecond
				req.HoldTTL = 2 * time.Hour
				first := mustClaim(t, e.s, req)
				waitPast(t, e.s, first.Record.LeaseUntil)

				req.Token = "tok-B"
				req.OnExpired = tc.onExpired
				req.Fingerprint = tc.fingerprint
				req.HoldTTL = 3 * time.Hour
				res := mustClaim(t, e.s, req)
				r := res.Record
				if res.Claimed != tc.wantClaimed || res.TakeOver != tc.wantClaimed {
					t.Fatalf("Claimed=%v TakeOver=%v, want %v", res.Claimed, res.TakeOver, tc.wantClaimed)
				}
				if r.State != tc.wantState || r.Reason != tc.wantReason || r.Attempts != 2 || r.Executions != tc.wantExe {
					t.Fatalf("record %+v; want state %q reason %q attempts 2 executions %d", r, tc.wantState, tc.wantReason, tc.wantExe)
				}
				wantTok := "tok-A"
				if tc.wantClaimed {
					wantTok = "tok-B"
					if !r.StartedAt.After(first.Record.StartedAt) || !r.LeaseUntil.Equal(r.StartedAt.Add(300*time.Millisecond)) {
						t.Fatalf("takeover did not restart the lease: started %v lease %v", r.StartedAt, r.LeaseUntil)
					}
				}
				if r.Token != wantTok {
					t.Fatalf("token %q, want %q", r.Token, wantTok)
				}
				if tc.wantState == StateUnknown || tc.wantClaimed {
					checkTTL(t, e.s, id, 3*time.Hour)
				}
				if tc.wantState == StateUnknown {
					// Held records stay held for later requests.
					again := mustClaim(t, e.s, req)
					if again.Claimed || again.Record.State != StateUnknown {
						t.Fatalf("held record claimed again: %+v", again)
					}
				}
			})
		}
	})
}

func TestLateFinisherResolvesHeldRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		req := claimReq(id, "tok-A")
		req.Lease = 300 * time.Millisecond
		first := mustClaim(t, e.s, req)
		waitPast(t, e.s, first.Record.LeaseUntil)
		req.Token = "tok-B"
		if res := mustClaim(t, e.s, req); res.Record.State != StateUnknown {
			t.Fatalf("state %q, want outcome_unknown", res.Record.State)
		}
		// The slow claimant's real outcome still lands: nobody took over.
		ok, err := e.s.Complete(ctx, completion(id, "tok-A", sampleResult(), time.Hour))
		mustOK(t, "late Complete", ok, err)
		r := mustGet(t, e.s, id)
		if r.State != StateCompleted || r.Reason != "" || r.Status != 201 {
			t.Fatalf("record %+v", r)
		}
		checkTTL(t, e.s, id, time.Hour)
	})
}

func TestRenewKeepsClaimAlive(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		req := claimReq(id, "tok-A")
		req.Lease = 300 * time.Millisecond
		req.OnExpired = "release"
		first := mustClaim(t, e.s, req)

		ok, err := e.s.Renew(ctx, id, "tok-A", time.Minute)
		mustOK(t, "Renew", ok, err)
		ok, err = e.s.Renew(ctx, id, "tok-other", time.Minute)
		mustLose(t, "Renew with another token", ok, err)

		waitPast(t, e.s, first.Record.LeaseUntil)
		req.Token = "tok-B"
		res := mustClaim(t, e.s, req)
		if res.Claimed || res.Record.State != StateInFlight || res.Record.Token != "tok-A" {
			t.Fatalf("renewed claim was taken over: Claimed=%v record %+v", res.Claimed, res.Record)
		}
		if !res.Record.LeaseUntil.After(first.Record.LeaseUntil.Add(30 * time.Second)) {
			t.Fatalf("LeaseUntil %v not extended (was %v)", res.Record.LeaseUntil, first.Record.LeaseUntil)
		}

		ok, err = e.s.Complete(ctx, completion(id, "tok-A", sampleResult(), time.Hour))
		mustOK(t, "Complete", ok, err)
		ok, err = e.s.Renew(ctx, id, "tok-A", time.Minute)
		mustLose(t, "Renew after Complete", ok, err)
	})
}

func TestTTLs(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()

		inflight := newID(t)
		req := claimReq(inflight, "tok")
		req.HoldTTL = 2 * time.Hour
		mustClaim(t, e.s, req)
		checkTTL(t, e.s, inflight, 2*time.Hour)

		completed := newID(t)
		mustClaim(t, e.s, claimReq(completed, "tok"))
		ok, err := e.s.Complete(ctx, completion(completed, "tok", sampleResult(), 72*time.Hour))
		mustOK(t, "Complete", ok, err)
		checkTTL(t, e.s, completed, 72*time.Hour)

		unknown := newID(t)
		mustClaim(t, e.s, claimReq(unknown, "tok"))
		ok, err = e.s.MarkUnknown(ctx, unknown, "tok", "upstream_5xx", 5*time.Hour)
		mustOK(t, "MarkUnknown", ok, err)
		checkTTL(t, e.s, unknown, 5*time.Hour)
		r := mustGet(t, e.s, unknown)
		if r.State != StateUnknown || r.Reason != "upstream_5xx" {
			t.Fatalf("record %+v", r)
		}
		// A completed record is never demoted.
		ok, err = e.s.MarkUnknown(ctx, completed, "tok", "upstream_5xx", 5*time.Hour)
		mustLose(t, "MarkUnknown on a completed record", ok, err)
		if r := mustGet(t, e.s, completed); r.State != StateCompleted {
			t.Fatalf("completed record became %q", r.State)
		}

		released := newID(t)
		mustClaim(t, e.s, claimReq(released, "tok"))
		ok, err = e.s.Release(ctx, released, "tok", 10*time.Minute)
		mustOK(t, "Release", ok, err)
		checkTTL(t, e.s, released, 10*time.Minute)

		defaults := newID(t)
		req = claimReq(defaults, "tok")
		req.Lease, req.HoldTTL = 0, 0
		res := mustClaim(t, e.s, req)
		checkTTL(t, e.s, defaults, DefaultHoldTTL)
		if got := res.Record.LeaseUntil.Sub(res.Record.StartedAt); got != DefaultLease {
			t.Fatalf("default lease %v, want %v", got, DefaultLease)
		}
		ok, err = e.s.Complete(ctx, completion(defaults, "tok", sampleResult(), 0))
		mustOK(t, "Complete", ok, err)
		checkTTL(t, e.s, defaults, DefaultTTL)
	})
}

func TestReleaseThenReclaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		mustClaim(t, e.s, claimReq(id, "tok-A"))
		mustClaim(t, e.s, claimReq(id, "tok-dup")) // a duplicate while in flight
		ok, err := e.s.Release(ctx, id, "tok-A", time.Hour)
		mustOK(t, "Release", ok, err)
		r := mustGet(t, e.s, id)
		if r.State != StateReleased || r.Attempts != 2 || r.Executions != 1 {
			t.Fatalf("released record %+v; want attempts 2 executions 1", r)
		}

		other := claimReq(id, "tok-X")
		other.Fingerprint = "fp-other"
		if res := mustClaim(t, e.s, other); res.Claimed || res.Record.State != StateReleased {
			t.Fatalf("another payload reclaimed a released record: %+v", res)
		}
		otherRule := claimReq(id, "tok-X")
		otherRule.FingerprintRule = "whole-body"
		if res := mustClaim(t, e.s, otherRule); res.Claimed {
			t.Fatalf("a claim under another fingerprint rule reclaimed: %+v", res)
		}

		res := mustClaim(t, e.s, claimReq(id, "tok-B"))
		r = res.Record
		if !res.Claimed || !res.TakeOver || r.State != StateInFlight || r.Token != "tok-B" ||
			r.Attempts != 5 || r.Executions != 2 {
			t.Fatalf("reclaim: Claimed=%v TakeOver=%v record %+v; want attempts 5 executions 2", res.Claimed, res.TakeOver, r)
		}
		checkTTL(t, e.s, id, 720*time.Hour)
		ok, err = e.s.Complete(ctx, completion(id, "tok-A", sampleResult(), time.Hour))
		mustLose(t, "Complete by the releaser", ok, err)
		ok, err = e.s.Complete(ctx, completion(id, "tok-B", sampleResult(), time.Hour))
		mustOK(t, "Complete by the reclaimer", ok, err)
	})
}

func TestBinaryBodyAndMultiValueHeaders(t *testing.T) {
	body := make([]byte, 0, 600)
	for i := range 256 {
		body = append(body, byte(i))
	}
	body = append(body, 0xff, 0xfe, 0x00, 0xc3, 0x28, '\r', '\n', 0x80)
	body = append(body, bytes.Repeat([]byte{0xed, 0xa0, 0x80}, 100)...) // surrogate halves: invalid UTF-8
	header := http.Header{
		"Set-Cookie":     {"a=1; Path=/", "b=2; HttpOnly", "c=3; Expires=Wed, 21 Oct 2015 07:28:00 GMT"},
		"Content-Type":   {"text/plain; charset=iso-8859-1"},
		"Location":       {"https://crm.example/deals/42?x=a:b"},
		"X-Empty":        {""},
		"X-Leading":      {"  two leading spaces"},
		"X-Lowercase-ok": {"kept as written"},
	}
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		mustClaim(t, e.s, claimReq(id, "tok"))
		res := Result{Status: 200, Header: header, Body: body, Digest: "d", ExternalID: "x"}
		ok, err := e.s.Complete(ctx, completion(id, "tok", res, time.Hour))
		mustOK(t, "Complete", ok, err)
		for _, r := range []*Record{mustClaim(t, e.s, claimReq(id, "tok-2")).Record, mustGet(t, e.s, id)} {
			if !bytes.Equal(r.Body, body) {
				t.Fatalf("body differs: got %d bytes %q", len(r.Body), r.Body)
			}
			if !reflect.DeepEqual(r.Header, header) {
				t.Fatalf("header differs:\n got %#v\nwant %#v", r.Header, header)
			}
		}
	})
}

func TestBodyOmittedAndEmpty(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		mustClaim(t, e.s, claimReq(id, "tok"))
		res := Result{Status: 200, BodyOmitted: true, Digest: strings.Repeat("ab", 32)}
		ok, err := e.s.Complete(ctx, completion(id, "tok", res, time.Hour))
		mustOK(t, "Complete", ok, err)
		r := mustGet(t, e.s, id)
		if !r.BodyOmitted || len(r.Body) != 0 || r.Header != nil || r.Digest != res.Digest {
			t.Fatalf("record %+v", r)
		}
	})
}

func TestKeyLayout(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		shard := id[:1]
		record := "idemgate:{" + shard + "}" + id
		index := "idemgate:{" + shard + "}:idx:in_flight"
		if got := e.s.Key(id); got != record {
			t.Fatalf("Key = %q, want %q", got, record)
		}
		if got := e.s.IndexKey(shard, StateInFlight); got != index {
			t.Fatalf("IndexKey = %q, want %q", got, index)
		}
		mustClaim(t, e.s, claimReq(id, "tok"))
		keys, err := e.s.Client().Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		want := []string{record, index}
		slices.Sort(keys)
		slices.Sort(want)
		if !slices.Equal(keys, want) {
			t.Fatalf("keys in Redis: %q, want %q", keys, want)
		}
		if typ, _ := e.s.Client().Type(ctx, record).Result(); typ != "hash" {
			t.Fatalf("record type %q, want hash", typ)
		}
		if typ, _ := e.s.Client().Type(ctx, index).Result(); typ != "zset" {
			t.Fatalf("index type %q, want zset", typ)
		}

		custom := New(e.s.Client(), "tenant1:idem:", 0)
		mustClaim(t, custom, claimReq(id, "tok"))
		if n, err := e.s.Client().Exists(ctx, "tenant1:idem:{"+shard+"}"+id, "tenant1:idem:{"+shard+"}:idx:in_flight").Result(); err != nil || n != 2 {
			t.Fatalf("custom prefix keys missing: %d, %v", n, err)
		}

		for _, bad := range []string{"", "a}b", "a{b", "with space", "x:y", strings.Repeat("a", 129), "caf\xc3\xa9"} {
			if _, err := e.s.Claim(ctx, claimReq(bad, "tok")); !errors.Is(err, ErrInvalidID) {
				t.Errorf("Claim(%q) err = %v, want ErrInvalidID", bad, err)
			}
			if _, err := e.s.Get(ctx, bad); !errors.Is(err, ErrInvalidID) {
				t.Errorf("Get(%q) err = %v, want ErrInvalidID", bad, err)
			}
			if _, err := e.s.Complete(ctx, completion(bad, "tok", Result{}, time.Hour)); !errors.Is(err, ErrInvalidID) {
				t.Errorf("Complete(%q) err = %v, want ErrInvalidID", bad, err)
			}
		}
	})
}

func TestClaimRequestValidation(t *testing.T) {
	s := New(nil, "", 0) // never reaches Redis
	for _, tc := range []struct {
		name string
		edit func(*ClaimRequest)
	}{
		{"no token", func(r *ClaimRequest) { r.Token = "" }},
		{"bad on_expired", func(r *ClaimRequest) { r.OnExpired = "maybe" }},
		{"negative lease", func(r *ClaimRequest) { r.Lease = -time.Second }},
		{"negative hold", func(r *ClaimRequest) { r.HoldTTL = -time.Second }},
	} {
		req := claimReq("0123456789abcdef0123456789abcdef", "tok")
		tc.edit(&req)
		if _, err := s.Claim(context.Background(), req); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// TestRedisDown checks that every call fails with an error, promptly, when
// Redis is unreachable, and (real Redis) that the store recovers after a
// restart, whose empty script cache the EVAL fallback handles.
func TestRedisDown(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		mustClaim(t, e.s, claimReq(id, "tok"))
		e.stop()

		calls := map[string]func() error{
			"Claim": func() error { _, err := e.s.Claim(ctx, claimReq(id, "tok2")); return err },
			"Renew": func() error { _, err := e.s.Renew(ctx, id, "tok", time.Second); return err },
			"Complete": func() error {
				_, err := e.s.Complete(ctx, completion(id, "tok", sampleResult(), time.Hour))
				return err
			},
			"Release":     func() error { _, err := e.s.Release(ctx, id, "tok", time.Hour); return err },
			"MarkUnknown": func() error { _, err := e.s.MarkUnknown(ctx, id, "tok", "x", time.Hour); return err },
			"Get":         func() error { _, err := e.s.Get(ctx, id); return err },
		}
		for name, call := range calls {
			done := make(chan error, 1)
			go func() { done <- call() }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("%s against a stopped Redis: no error", name)
				}
				if !strings.HasPrefix(err.Error(), "store: ") {
					t.Fatalf("%s error %q lacks the store: prefix", name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s hung against a stopped Redis", name)
			}
		}

		if e.srv == nil {
			return
		}
		e.srv.Restart(t)
		var res ClaimResult
		var err error
		for range 50 { // the pool may hand out a dead connection or two first
			if res, err = e.s.Claim(ctx, claimReq(id, "tok3")); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || !res.Claimed {
			t.Fatalf("Claim after restart: %+v, %v", res, err)
		}
	})
}

func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no address", Options{}, "no Redis address"},
		{"several addresses", Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, "need cluster or master_name"},
		{"nothing listening", Options{Addrs: []string{"127.0.0.1:1"}, DialTimeout: time.Second}, "ping Redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.opts)
			if err == nil {
				_ = s.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestNewToken(t *testing.T) {
	a, b := NewToken(), NewToken()
	if len(a) != 32 || a == b {
		t.Fatalf("tokens %q %q", a, b)
	}
}

// TestRecordsExpire: a record whose TTL ran out is gone (the embedded server
// advances its TTLs once a second, so this takes up to about a second).
func TestRecordsExpire(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		mustClaim(t, e.s, claimReq(id, "tok"))
		ok, err := e.s.Release(ctx, id, "tok", 50*time.Millisecond)
		mustOK(t, "Release", ok, err)
		for range 1000 {
			r, err := e.s.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if r == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("record never expired")
	})
}

// completion is the CompleteRequest of a claim on id with token.
func completion(id, token string, res Result, ttl time.Duration) CompleteRequest {
	return CompleteRequest{Claim: ClaimRequest{ID: id, Token: token}, Result: res, TTL: ttl}
}

// TestCompleteWritesLostRecord: a result whose claim is gone (a failover
// lost it, or it expired) is written anew, completed, with the claim's
// identity; a record that carries another token is never overwritten.
func TestCompleteWritesLostRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := "cafe01"
		req := claimReq(id, "tok-A")
		started := time.UnixMilli(time.Now().Add(-time.Second).UnixMilli())
		ok, err := e.s.Complete(ctx, CompleteRequest{Claim: req, StartedAt: started, Result: sampleResult(), TTL: time.Hour})
		mustOK(t, "Complete of a lost claim", ok, err)
		r, err := e.s.Get(ctx, id)
		if err != nil || r == nil {
			t.Fatalf("Get: %v %v", r, err)
		}
		if r.State != StateCompleted || r.Route != req.Route || r.Operation != req.Operation ||
			r.Fingerprint != req.Fingerprint || r.FingerprintRule != req.FingerprintRule ||
			r.Attempts != 1 || r.Executions != 1 || !r.StartedAt.Equal(started) ||
			r.Status != sampleResult().Status || !bytes.Equal(r.Body, sampleResult().Body) {
			t.Fatalf("written record %+v", r)
		}
		checkTTL(t, e.s, id, time.Hour)
		// A retry of the request now replays it.
		res := mustClaim(t, e.s, claimReq(id, "tok-C"))
		if res.Claimed || res.Record.State != StateCompleted || res.Record.Attempts != 2 {
			t.Fatalf("claim after the rewrite: %+v %+v", res, res.Record)
		}
		// Another claimant's record is never overwritten.
		ok, err = e.s.Complete(ctx, CompleteRequest{Claim: claimReq(id, "tok-B"), Result: Result{Status: 500}, TTL: time.Hour})
		mustLose(t, "Complete under a foreign token", ok, err)
	})
}
