package guard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/idemgate/idemgate/store"
)

// Waiting for the first request (on_in_flight: wait): a duplicate that
// finds the first request with its key in flight waits on a store.Watch,
// a Go channel, holding no store connection, until a completion notice
// for its record arrives (from whichever gateway ran the first request),
// then reads the record once and answers as if it had just arrived: a
// replay, the 409 of an outcome held as unknown, or, when the first was
// released, a claim of its own if the route's breaker lets it execute
// (else the breaker's 503). Past in_flight_wait it gets the 409 it would
// have had without waiting, and so does a duplicate that finds no waiting
// place (maxWaitersPerKey, maxWaitersPerProcess). Only where notices are unavailable (an
// engine without them, a Redis subscription being made anew) does it
// poll the store, no faster than waitPollMin.

// The polling bounds of a waiter whose notices are unavailable: a tenth of
// its in_flight_wait, within these.
const (
	waitPollMin = 50 * time.Millisecond
	waitPollMax = time.Second
)

// Results of a wait, the result label of idemgate_in_flight_waits_total.
const (
	waitReplayed  = "replayed"    // the first completed: its replay
	waitUnknown   = "unknown"     // the first ended held as outcome unknown: 409
	waitExecuted  = "executed"    // the first was released: this request claimed and executed
	waitTimeout   = "timeout"     // in_flight_wait passed: 409
	waitGone      = "client_gone" // the client hung up
	waitStoreFail = "store_error" // the store could not be read: 409
	// waitBreakerOpen: the first ended without a result, and the route's
	// breaker refused this request's execution: 503 breaker-open.
	waitBreakerOpen = "breaker_open"
)

// The bounds of waiting duplicates, in each process (docs/capacity.md):
// a waiter holds its request, body and all, so the bounds bound the
// memory that waiting can take. Past either, a duplicate gets the 409 it
// would have had without waiting, at once; idemgate_waits_refused_total
// counts it by reason.
const (
	maxWaitersPerKey     = 32  // waiting duplicates of one record
	maxWaitersPerProcess = 256 // waiting duplicates in all
)

// Why a duplicate did not wait, the reason label of
// idemgate_waits_refused_total.
const (
	waitFullKey     = "per_key"
	waitFullProcess = "per_process"
)

// waiting counts the process's waiting duplicates, in all and by record.
var waiting = &waitPlaces{byKey: map[string]int{}}

// waitPlaces are the places for waiting duplicates.
type waitPlaces struct {
	mu    sync.Mutex
	total int
	byKey map[string]int
}

// take takes a place for a waiter of record key, or says why there is
// none: waitFullKey or waitFullProcess.
func (p *waitPlaces) take(key string) (full string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.byKey[key] >= maxWaitersPerKey:
		return waitFullKey
	case p.total >= maxWaitersPerProcess:
		return waitFullProcess
	}
	p.byKey[key]++
	p.total++
	return ""
}

// give gives back a place taken for record key.
func (p *waitPlaces) give(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total--
	if p.byKey[key]--; p.byKey[key] <= 0 {
		delete(p.byKey, key)
	}
}

// waitKey names record id in the gate's store, for the process's
// waiters: handlers that share a store share its records.
func (g *Gate) waitKey(id string) string { return fmt.Sprintf("%p/%s", g.Store, id) }

// enterWait takes a waiting place for the request (see waitPlaces), and
// counts it in idemgate_waiters while it waits; leave gives it back. When
// no place is free it counts the refusal and ok is false.
func (g *Gate) enterWait(op *Operation, f *Found) (leave func(), ok bool) {
	key := g.waitKey(op.ID)
	if full := waiting.take(key); full != "" {
		g.Metrics.WaitsRefused.WithLabelValues(op.Route.Name, full).Inc()
		f.Note = "not waiting for the first request: too many duplicates wait already (" + full + ")"
		return nil, false
	}
	gauge := g.Metrics.Waiters.WithLabelValues(op.Route.Name)
	gauge.Inc()
	return func() {
		gauge.Dec()
		waiting.give(key)
	}, true
}

// wokenReads shares one store read among the waiters of a record that
// the same notice woke: 50 duplicates of one request cost one GET.
var wokenReads singleflight.Group

// readWoken reads record id for a woken waiter, sharing the read with the
// other waiters of the record in this process. The read is not the
// request's: a waiter whose client hangs up does not fail the others'.
// Each gets a record of its own (its header map is written into a
// response).
func (g *Gate) readWoken(id string) (*store.Record, error) {
	v, err, _ := wokenReads.Do(g.waitKey(id), func() (any, error) {
		return g.Store.Get(context.Background(), id)
	})
	rec, _ := v.(*store.Record)
	if err != nil || rec == nil {
		return nil, err
	}
	own := *rec
	own.Header = rec.Header.Clone()
	return &own, nil
}

// ProvisionNotices readies the store's completion notices when one of
// routes waits for them (a Redis store subscribes while requests wait,
// once for every config that shares it).
func (g *Gate) ProvisionNotices(routes []*Route) {
	for _, rt := range routes {
		if rt.Waits() {
			if nf, ok := g.Store.(store.Notifier); ok {
				g.Notices = nf.Notices()
			}
			return
		}
	}
}

// waiter is a request's readiness to wait for its key's first request.
type waiter struct {
	watch   *store.Watch  // nil without notices
	notices store.Notices // nil without notices
}

// watch registers interest in the request's record before its claim, on a
// route that waits (nil otherwise): a notice sent after the claim found the
// first request in flight cannot be missed.
func (g *Gate) watch(rt *Route, id string) *waiter {
	if !rt.Waits() {
		return nil
	}
	if g.Notices == nil {
		return &waiter{}
	}
	return &waiter{watch: g.Notices.Watch(id), notices: g.Notices}
}

// stop removes the watch.
func (wt *waiter) stop() {
	if wt != nil && wt.watch != nil {
		wt.watch.Stop()
	}
}

// woken is the watch's channel; nil (never ready) without notices.
func (wt *waiter) woken() <-chan struct{} {
	if wt.watch == nil {
		return nil
	}
	return wt.watch.C
}

// need keeps the store's notices running while the request waits (see
// store.Notices.Need); call the function it returns when done.
func (wt *waiter) need() func() {
	if wt.notices == nil {
		return func() {}
	}
	return wt.notices.Need()
}

// live reports whether notices arrive now.
func (wt *waiter) live() bool { return wt.notices != nil && wt.notices.Live() }

// shouldWait reports whether the claim found the first request with the
// same payload in flight: the one case waiting can change.
func (g *Gate) shouldWait(wt *waiter, op *Operation, f *Found) bool {
	return wt != nil && f.Record != nil && f.Record.State == store.StateInFlight && g.SameFingerprint(op, f.Record)
}

// await waits up to the route's in_flight_wait for the first request to
// end (see waiter). It returns a claim when the first was released and
// this request took the key over; otherwise f.Record is what answers the
// request (the completed or held record, or, past the wait, the record in
// flight as first found).
func (g *Gate) await(ctx context.Context, op *Operation, adm *Admission, f *Found, wt *waiter) (claim *store.Claim, err error) {
	rt := op.Route
	defer wt.need()()
	began := time.Now()
	first := f.Record
	// The store's clock, from its last reading (f.Now at the claim) on.
	clockAt, clock := began, f.Now
	storeNow := func() time.Time { return clock.Add(time.Since(clockAt)) }
	result := waitTimeout
	defer func() {
		waited := time.Since(began)
		g.Metrics.Waits.WithLabelValues(rt.Name, result).Inc()
		g.Metrics.WaitTime.WithLabelValues(rt.Name).Observe(waited.Seconds())
		f.Waited = waited
		if f.Record == first {
			// Answered as without waiting: the lease hint counts the wait.
			f.Now = storeNow()
		}
	}()
	deadline := time.NewTimer(rt.InFlightWait)
	defer deadline.Stop()
	poll := min(max(rt.InFlightWait/10, waitPollMin), waitPollMax)
	for {
		var tick <-chan time.Time
		if !wt.live() {
			tick = time.After(poll)
		}
		select {
		case <-wt.woken():
		case <-tick:
		case <-deadline.C:
			return nil, nil
		case <-ctx.Done():
			result = waitGone
			f.Note = "the client went away while waiting for the first request"
			return nil, nil
		}
		rec, err := g.readWoken(op.ID)
		if err != nil {
			if ctx.Err() != nil {
				result = waitGone
				return nil, nil
			}
			g.Metrics.StoreErrors.WithLabelValues(rt.Name, "wait").Inc()
			g.Logger.Debug("reading a record while waiting failed", zap.String("record_id", op.ID), zap.Error(err))
			if time.Since(began)+poll >= rt.InFlightWait {
				result = waitStoreFail
				return nil, nil
			}
			continue
		}
		switch {
		case rec != nil && rec.State == store.StateCompleted:
			f.Record, result = rec, waitReplayed
			return nil, nil
		case rec != nil && rec.State == store.StateUnknown:
			f.Record, f.Now, result = rec, storeNow(), waitUnknown
			claim, err := g.settleHeld(ctx, op, f)
			if claim != nil && adm.Readmit() {
				// Found not applied, but the breaker refuses it: the
				// claim goes back unused (ServeHTTP).
				result = waitBreakerOpen
			}
			return claim, err
		case rec != nil && rec.State == store.StateInFlight && rec.LeaseUntil.After(storeNow()):
			continue // still running (a notice of another claim, or notices resumed)
		}
		// Released, gone, or a lease that ran out: claim as if just
		// arrived, if the breaker lets a new execution through.
		if adm.Readmit() {
			result = waitBreakerOpen
			return nil, ErrBreakerOpen
		}
		claim, err := g.claimOrSettle(ctx, op, f)
		switch {
		case err != nil:
			result = waitStoreFail
			return nil, err
		case claim != nil:
			result = waitExecuted
			if adm.Readmit() {
				// The breaker opened between its answer and the claim (an
				// execution that failed meanwhile released the record):
				// the claim goes back unused (ServeHTTP).
				result = waitBreakerOpen
			}
			return claim, nil
		case f.Record.State == store.StateInFlight:
			// Another duplicate took the key over: wait for that one.
			first, clockAt, clock = f.Record, time.Now(), f.Now
			adm.giveBackProbe()
			continue
		case f.Record.State == store.StateCompleted:
			result = waitReplayed
		default:
			result = waitUnknown
		}
		return nil, nil
	}
}
