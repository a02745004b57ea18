package guard

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/unrecorded"
)

// recording is the one store call that records a call's outcome.
type recording struct {
	op     string // complete | release | hold: the store step, for metrics and logs
	result string // the executions metric's label
	call   func(ctx context.Context) (bool, error)
}

// completing is the recording that stores res under c. Its body may be the
// capture's pooled buffer: see detached.
func completing(c *store.Claim, res store.Result) recording {
	return recording{"complete", "completed", func(ctx context.Context) (bool, error) { return c.Complete(ctx, res) }}
}

// recordingFor decides what the outcome leaves on the record, by the
// route's policy for unknown outcomes. An upstream's "not done", and an
// unknown outcome that on_unknown_outcome: release lets go, count against
// the route's retry budget; exhausted is told when one used the budget up
// and the record is held.
func recordingFor(rt *Route, c *store.Claim, out exchange.Result, res store.Result, exhausted func()) recording {
	v := out.Verdict
	if v == exchange.VerdictUnknown {
		switch rt.OnUnknownOutcome {
		case config.OnUnknownRelease:
			v = exchange.VerdictRelease
		case config.OnUnknownStore:
			if !out.CutOff {
				v = exchange.VerdictComplete
			}
		}
	}
	switch v {
	case exchange.VerdictComplete:
		return completing(c, res)
	case exchange.VerdictRelease:
		result := "released"
		if out.Reason == "not_sent" {
			result = "not_sent"
		}
		// "Not done", or unknown and let go by the route's policy: either
		// counts against the budget, and the record says which.
		notDone := c.NotDone
		if out.Verdict != exchange.VerdictRelease {
			notDone = c.LetGo
		}
		return recording{"not_done", result, func(ctx context.Context) (bool, error) {
			o, err := notDone(ctx, out.Status, int64(rt.MaxExecutions))
			if o == store.NotDoneExhausted {
				exhausted()
			}
			return o != store.NotDoneLost, err
		}}
	default:
		return recording{"hold", "held", func(ctx context.Context) (bool, error) { return c.MarkUnknown(ctx, out.Reason) }}
	}
}

// record records the call's outcome under its claim; res is what it
// leaves for replays if it is recorded as completed. The client already
// has the upstream's answer, and the call is never repeated: a store that
// fails now (a stall, a failover) is tried again in the background, under
// the same token, until the claim's lease would have run out. A result
// whose claim a failover lost is written anew (see store.CompleteRequest).
// It returns the request's outcome, and what the outcome left on the
// record: completed, released, not_sent, held or exhausted.
func (g *Gate) record(op *Operation, adm *Admission, c *store.Claim, got exchange.Result, res store.Result) (Outcome, string) {
	rt := op.Route
	out := Outcome{Name: OutcomeExecuted, Status: got.Status}
	var held atomic.Bool
	rec := recordingFor(rt, c, got, res, func() {
		held.Store(true)
		g.retriesExhausted(rt, c.ID())
	})
	if rec.op == "hold" {
		out.Note = "held: " + got.Reason
		if !op.Check.IsZero() {
			g.Verifier.Schedule(&rt.Resolved, c)
		}
	}
	g.Metrics.Executions.WithLabelValues(rt.Name, rec.result).Inc()
	if adm.Breaker != nil {
		adm.Breaker.Done(adm.Probe, got.Verdict != exchange.VerdictComplete)
	}
	deadline := time.Now().Add(c.Lease())
	ok, err := g.recordOnce(rt.Name, c.ID(), rec)
	result := rec.result
	if held.Load() {
		out.Note = "held: " + store.ReasonRetriesExhausted
		result = "exhausted"
	}
	if err != nil {
		g.Logger.Warn("recording the upstream outcome failed; retrying in the background until the lease runs out",
			zap.String("route", rt.Name), zap.String("record_id", c.ID()), zap.String("step", rec.op), zap.Error(err))
		var size int64
		if rec.op == "complete" {
			// The capture's buffer goes back to its pool when the request
			// ends: the background tries keep a copy of their own.
			res.Body = bytes.Clone(res.Body)
			rec = completing(c, res)
			size = unrecorded.ResultSize(res)
		}
		g.Use.Enter()
		go g.keepRecording(rt.Name, c, rec, size, deadline, err)
	} else if !ok {
		g.claimLost(rt.Name, c.ID(), rec.op)
	}
	return out, result
}

// recordOnce makes one try, bounded by the store's op_timeout. Not the
// request's context: the outcome is recorded even when the client has gone.
func (g *Gate) recordOnce(route, id string, rec recording) (bool, error) {
	began := time.Now()
	ok, err := rec.call(context.Background())
	g.Metrics.ObserveStore(rec.op, began, err)
	if err != nil {
		g.Metrics.StoreErrors.WithLabelValues(route, rec.op).Inc()
	}
	return ok, err
}

// Retry pacing of keepRecording.
const (
	recordRetryFirst = 50 * time.Millisecond
	recordRetryMax   = time.Second
)

// A completion the store refused for want of room is kept past its
// claim's lease, within the process's bound (package unrecorded), and written
// once the store has room again, its claim renewed meanwhile (see
// keepRecording). A retry of its key on this gateway writes it first (see
// writeKept).

// ErrKeptUnwritten: a retry found its key's result kept, and the store
// still refuses it. The retry fails closed whatever the route's
// on_store_error: forwarding it would execute the operation again.
var ErrKeptUnwritten = errors.New("this gateway keeps the key's result, which the store has no room for yet")

// KeptResults are the process's kept completions: one bound per gateway,
// across its sites and config reloads.
var KeptResults = unrecorded.New[KeptCompletion](unrecorded.MaxCount, unrecorded.MaxBytes, metrics.Process.Kept, metrics.Process.KeptBytes)

// KeptCompletion is one completion kept past its claim's lease.
type KeptCompletion struct {
	key   unrecorded.Key
	route string
	rec   recording // completing: it keeps its own copy of the body

	mu   sync.Mutex // held while it is written: one try at a time
	done bool       // under mu: written, or its claim was lost
}

// keepRecording tries rec again, with growing pauses, until it lands or
// deadline passes; err is why the last try failed. It runs in the
// background and leaves the handler when done.
//
// A completion the store refused for want of room (store.ErrNoRoom) is
// kept past deadline, within the gateway's bound (see package unrecorded):
// it is tried until it lands, its claim renewed every third of its lease
// meanwhile, so the answer the client got is what a retry replays. A
// store that had no room for the renewals either lets the lease run out,
// and a retry meanwhile holds the record as outcome unknown (lease
// expired): the completion, written later under the same token, still
// applies to it (see store.CompleteRequest), while a record an operator
// resolved, a check settled or another claim took over has a new token
// and is never overwritten.
func (g *Gate) keepRecording(route string, c *store.Claim, rec recording, size int64, deadline time.Time, err error) {
	defer g.Use.Leave()
	var kc *KeptCompletion
	defer func() {
		if kc != nil {
			g.Kept.Forget(kc)
		}
	}()
	full := false // the bound kept a refused completion out; said once
	renewed := time.Now()
	pause := recordRetryFirst
	for tries := 2; ; tries++ {
		if kc == nil && rec.op == "complete" && errors.Is(err, store.ErrNoRoom) {
			kc = &KeptCompletion{key: unrecorded.Key{Engine: g.Store, ID: c.ID()}, route: route, rec: rec}
			if !g.Kept.Keep(kc.key, kc, size) {
				kc = nil
				if !full {
					full = true
					n, b := g.Kept.Count()
					maxN, maxB := g.Kept.Bound()
					g.Logger.Warn("the store has no room for the upstream's result and this gateway keeps no more: it is tried until the lease runs out, then the record is held as outcome unknown",
						zap.String("route", route), zap.String("record_id", c.ID()),
						zap.Int("kept", n), zap.Int64("kept_bytes", b), zap.Int("max_kept", maxN), zap.Int64("max_kept_bytes", maxB))
				}
			} else {
				g.Logger.Warn("the store has no room for the upstream's result: the gateway keeps it, renewing its claim, and writes it once the store has room again",
					zap.String("route", route), zap.String("record_id", c.ID()), zap.Error(err))
			}
		}
		if kc == nil && time.Now().Add(pause).After(deadline) {
			g.Logger.Error("gave up recording the upstream outcome; the record will surface as outcome unknown",
				zap.String("route", route), zap.String("record_id", c.ID()), zap.String("step", rec.op), zap.Int("tries", tries-1))
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, recordRetryMax)
		if kc == nil {
			var ok bool
			ok, err = g.recordOnce(route, c.ID(), rec)
			if err == nil {
				g.recorded(route, c.ID(), rec.op, ok, zap.Int("tries", tries))
				return
			}
		} else {
			pause = min(pause, c.Lease()/3) // a try at each renewal
			if time.Since(renewed) >= c.Lease()/3 {
				g.renewKept(c)
				renewed = time.Now()
			}
			var done bool
			if done, err = g.writeKept(kc, zap.Int("tries", tries)); done {
				return
			}
		}
		g.Logger.Debug("recording the upstream outcome failed again", zap.String("record_id", c.ID()), zap.Int("try", tries), zap.Error(err))
	}
}

// recorded logs a later try that reached the store: ok, or the claim was
// lost. how says which try it was.
func (g *Gate) recorded(route, id, op string, ok bool, how zap.Field) {
	if !ok {
		g.claimLost(route, id, op)
		return
	}
	g.Logger.Info("recorded the upstream outcome after retrying",
		zap.String("route", route), zap.String("record_id", id), zap.String("step", op), how)
}

// writeKept tries to write a kept completion once; done when it is
// written (or its claim was lost), by this try or an earlier one. how
// says who tries, for the log.
func (g *Gate) writeKept(kc *KeptCompletion, how zap.Field) (done bool, err error) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if kc.done {
		return true, nil
	}
	ok, err := g.recordOnce(kc.route, kc.key.ID, kc.rec)
	if err != nil {
		return false, err
	}
	kc.done = true
	g.Kept.Forget(kc)
	g.recorded(kc.route, kc.key.ID, kc.rec.op, ok, how)
	return true, nil
}

// renewKept renews the claim of a kept completion, so the record stays
// in flight (not outcome unknown) until its result is written. It may
// fail for want of room, as the completion did.
func (g *Gate) renewKept(c *store.Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), g.OpTimeout)
	defer cancel()
	began := time.Now()
	ok, err := c.Renew(ctx)
	g.Metrics.ObserveStore("renew", began, err)
	if err != nil || !ok {
		g.Logger.Debug("renewing the claim of a kept result", zap.String("record_id", c.ID()), zap.Bool("renewed", ok), zap.Error(err))
	}
}

// retriesExhausted counts and logs an operation held because its
// executions used up the route's retry budget.
func (g *Gate) retriesExhausted(rt *Route, id string) {
	g.Metrics.Exhausted.WithLabelValues(rt.Name).Inc()
	g.Logger.Warn("retries exhausted: the operation is held for an operator; nothing is forwarded until one acts",
		zap.String("route", rt.Name), zap.String("record_id", id), zap.String("owner", rt.Owner),
		zap.Int("max_executions", rt.MaxExecutions))
}

func (g *Gate) claimLost(route, id, op string) {
	g.Logger.Warn("the claim was taken over while the upstream call ran; its outcome was not recorded",
		zap.String("route", route), zap.String("record_id", id), zap.String("step", op))
}
