package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/unrecorded"
)

// roomless is an engine that has no room for results while full is set:
// Complete fails with store.ErrNoRoom, and so does Renew unless renews.
type roomless struct {
	store.Engine
	renews bool
	full   atomic.Bool

	mu      sync.Mutex
	refused []string // the ids whose result was refused, in order
}

// Claim hands out claims whose calls come through e.
func (e *roomless) Claim(ctx context.Context, req store.ClaimRequest) (store.ClaimResult, error) {
	res, err := e.Engine.Claim(ctx, req)
	if res.Claim != nil {
		res.Claim = store.NewClaim(e, req, res.Claim.StartedAt, res.Claim.TTL)
	}
	return res, err
}

func (e *roomless) Complete(ctx context.Context, req store.CompleteRequest) (bool, error) {
	if e.full.Load() {
		e.mu.Lock()
		if !slices.Contains(e.refused, req.Claim.ID) {
			e.refused = append(e.refused, req.Claim.ID)
		}
		e.mu.Unlock()
		return false, fmt.Errorf("store: complete %s: %w", req.Claim.ID, store.ErrNoRoom)
	}
	return e.Engine.Complete(ctx, req)
}

func (e *roomless) Renew(ctx context.Context, id, token string, lease time.Duration) (bool, error) {
	if e.full.Load() && !e.renews {
		return false, fmt.Errorf("store: renew %s: %w", id, store.ErrNoRoom)
	}
	return e.Engine.Renew(ctx, id, token, lease)
}

// TestKeptCompletions: three calls answered 201 while the store has no
// room for their results, on a gateway that keeps results up to a bound
// (a count, or bytes). The results past the bound are given up when
// their lease runs out; the kept ones outlive it (their claims renewed
// when the store takes renewals: still in flight). While there is no
// room, a retry of a kept key fails closed (503), nothing forwarded.
// Once there is room, each kept key's retry replays the answer its
// client got, each key past the bound is held as outcome unknown, and
// no key was executed twice.
func TestKeptCompletions(t *testing.T) {
	t.Parallel()
	const calls = 3
	body := `{"id":"D-1"}` // counting's answers: a body and a Content-Type
	size := int64(len(body) + len("Content-Type") + len("application/json"))
	cases := []struct {
		name     string
		maxCount int
		maxBytes int64
		renews   bool
		kept     int
	}{
		{"count bound", 2, 1 << 20, false, 2},
		{"byte bound", 10, size + size/2, false, 1},
		{"renewed while kept", 2, 1 << 20, true, 2},
	}
	for _, st := range testStores {
		for _, tc := range cases {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				h, logs := newHandler(t, `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    lock_lease: 1s
`, shortOpTimeout(st.cfg(t)))
				e := &roomless{Engine: h.store, renews: tc.renews}
				h.store = e
				h.kept = unrecorded.New[keptCompletion](tc.maxCount, tc.maxBytes, prometheus.NewGauge(prometheus.GaugeOpts{Name: "kept"}), prometheus.NewGauge(prometheus.GaugeOpts{Name: "kept_bytes"}))
				t.Cleanup(func() {
					// Kept results are written, and their background
					// tries gone, before the store closes.
					e.full.Store(false)
					for i := 0; i < 100 && h.use.Active() > 0; i++ {
						time.Sleep(50 * time.Millisecond)
					}
				})
				up := &counting{}
				e.full.Store(true)
				answers := map[string]string{}
				for i := range calls {
					key := fmt.Sprintf("k%d", i)
					w := serve(h, up.next, "POST", "/deals", "{}", "Idempotency-Key", key)
					if w.Code != http.StatusCreated {
						t.Fatalf("%s while the store has no room: %d %s, want the upstream's 201", key, w.Code, w.Body)
					}
					answers[key] = w.Body.String()
				}
				// Those past the bound are given up when their lease runs out.
				for i := 0; i < 100 && logs.FilterMessageSnippet("gave up recording").Len() < calls-tc.kept; i++ {
					time.Sleep(50 * time.Millisecond)
				}
				if n, _ := h.kept.Count(); n != tc.kept || logs.FilterMessageSnippet("gave up recording").Len() != calls-tc.kept {
					t.Fatalf("%d kept and %d given up, want %d and %d", n, logs.FilterMessageSnippet("gave up recording").Len(), tc.kept, calls-tc.kept)
				}
				if n := logs.FilterMessageSnippet("this gateway keeps no more").Len(); n != calls-tc.kept {
					t.Errorf("%d results not kept were logged, want %d", n, calls-tc.kept)
				}
				// Which results the bound kept out is what the gateway
				// logged: the background tries race for the bound, so not
				// always in the order the store refused them.
				notKept := map[string]bool{}
				var keptIDs, refusedIDs []string
				for _, le := range logs.FilterMessageSnippet("this gateway keeps no more").All() {
					notKept[le.ContextMap()["record_id"].(string)] = true
				}
				e.mu.Lock()
				for _, id := range e.refused {
					if notKept[id] {
						refusedIDs = append(refusedIDs, id)
					} else {
						keptIDs = append(keptIDs, id)
					}
				}
				e.mu.Unlock()
				if len(keptIDs) != tc.kept || len(refusedIDs) != calls-tc.kept {
					t.Fatalf("refused %d results: %d kept, %d not; want %d and %d", len(keptIDs)+len(refusedIDs), len(keptIDs), len(refusedIDs), tc.kept, calls-tc.kept)
				}
				// Until the lease of the last one given up has run out.
				last := refusedIDs[len(refusedIDs)-1]
				for i := 0; i < 100; i++ {
					rec, err := h.store.Get(context.Background(), last)
					if err != nil || rec == nil {
						t.Fatalf("record %s: %v", last, err)
					}
					if !rec.LeaseUntil.After(time.Now()) {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				// A kept result outlived its lease: its record is in flight,
				// its lease renewed when the store takes renewals.
				for _, id := range keptIDs {
					rec, err := h.store.Get(context.Background(), id)
					if err != nil || rec == nil || rec.State != store.StateInFlight {
						t.Fatalf("kept %s: %+v %v, want in flight", id, rec, err)
					}
					if renewed := rec.LeaseUntil.After(time.Now()); renewed != tc.renews {
						t.Errorf("kept %s: lease until %v, renewed %v, want %v", id, rec.LeaseUntil, renewed, tc.renews)
					}
				}
				// A retry of a kept key while there is no room: 503.
				if w := serve(h, up.next, "POST", "/deals", "{}", "Idempotency-Key", "k0"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "no room yet") {
					t.Errorf("retry of kept k0 while the store has no room: %d %s, want 503", w.Code, w.Body)
				}

				e.full.Store(false)
				replayed, held := 0, 0
				for i := range calls {
					key := fmt.Sprintf("k%d", i)
					w := serve(h, up.next, "POST", "/deals", "{}", "Idempotency-Key", key)
					switch {
					case w.Code == http.StatusCreated && w.Header().Get("Idempotent-Replayed") == "true" && w.Body.String() == answers[key]:
						replayed++
					case w.Code == http.StatusConflict && strings.Contains(w.Body.String(), "#outcome-unknown"):
						held++
					default:
						t.Errorf("retry of %s: %d %q %s", key, w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
					}
				}
				if replayed != tc.kept || held != calls-tc.kept {
					t.Errorf("%d replayed and %d held, want %d and %d", replayed, held, tc.kept, calls-tc.kept)
				}
				for _, id := range refusedIDs {
					if rec, err := h.store.Get(context.Background(), id); err != nil || rec == nil || rec.State != store.StateUnknown {
						t.Errorf("result past the bound %s: %+v %v, want outcome unknown", id, rec, err)
					}
				}
				if n := up.calls.Load(); n != calls {
					t.Errorf("upstream ran %d times for %d keys", n, calls)
				}
				if n, b := h.kept.Count(); n != 0 || b != 0 {
					t.Errorf("%d results (%d bytes) still kept once written", n, b)
				}
			})
		}
	}
}
