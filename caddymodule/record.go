package caddymodule

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
func recordingFor(rt *route, c *store.Claim, out exchange.Result, res store.Result, exhausted func()) recording {
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
// It returns what the outcome left on the record: completed, released,
// not_sent, held or exhausted.
func (h *Handler) record(g *guarded, c *store.Claim, out exchange.Result, res store.Result) string {
	g.outcome = outcomeExecuted
	g.status = out.Status
	var held atomic.Bool
	rec := recordingFor(g.rt, c, out, res, func() {
		held.Store(true)
		h.retriesExhausted(g.rt, c.ID())
	})
	if rec.op == "hold" {
		g.note = "held: " + out.Reason
		if !g.check.IsZero() {
			h.verifier.Schedule(&g.rt.Resolved, c)
		}
	}
	h.metrics.Executions.WithLabelValues(g.rt.Name, rec.result).Inc()
	if g.brk != nil {
		g.brk.Done(g.probe, out.Verdict != exchange.VerdictComplete)
	}
	deadline := time.Now().Add(c.Lease())
	ok, err := h.recordOnce(g.rt.Name, c.ID(), rec)
	result := rec.result
	if held.Load() {
		g.note = "held: " + store.ReasonRetriesExhausted
		result = "exhausted"
	}
	if err != nil {
		h.logger.Warn("recording the upstream outcome failed; retrying in the background until the lease runs out",
			zap.String("route", g.rt.Name), zap.String("record_id", c.ID()), zap.String("step", rec.op), zap.Error(err))
		var size int64
		if rec.op == "complete" {
			// The capture's buffer goes back to its pool when the request
			// ends: the background tries keep a copy of their own.
			res.Body = bytes.Clone(res.Body)
			rec = completing(c, res)
			size = unrecorded.ResultSize(res)
		}
		h.use.Enter()
		go h.keepRecording(g.rt.Name, c, rec, size, deadline, err)
	} else if !ok {
		h.claimLost(g.rt.Name, c.ID(), rec.op)
	}
	return result
}

// recordOnce makes one try, bounded by the store's op_timeout. Not the
// request's context: the outcome is recorded even when the client has gone.
func (h *Handler) recordOnce(route, id string, rec recording) (bool, error) {
	began := time.Now()
	ok, err := rec.call(context.Background())
	h.metrics.ObserveStore(rec.op, began, err)
	if err != nil {
		h.metrics.StoreErrors.WithLabelValues(route, rec.op).Inc()
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

// errKeptUnwritten: a retry found its key's result kept, and the store
// still refuses it. The retry fails closed whatever the route's
// on_store_error: forwarding it would execute the operation again.
var errKeptUnwritten = errors.New("this gateway keeps the key's result, which the store has no room for yet")

// keptResults are the process's kept completions: one bound per gateway,
// across its sites and config reloads.
var keptResults = unrecorded.New[keptCompletion](unrecorded.MaxCount, unrecorded.MaxBytes, metrics.Process.Kept, metrics.Process.KeptBytes)

// keptCompletion is one completion kept past its claim's lease.
type keptCompletion struct {
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
func (h *Handler) keepRecording(route string, c *store.Claim, rec recording, size int64, deadline time.Time, err error) {
	defer h.use.Leave()
	var kc *keptCompletion
	defer func() {
		if kc != nil {
			h.kept.Forget(kc)
		}
	}()
	full := false // the bound kept a refused completion out; said once
	renewed := time.Now()
	pause := recordRetryFirst
	for tries := 2; ; tries++ {
		if kc == nil && rec.op == "complete" && errors.Is(err, store.ErrNoRoom) {
			kc = &keptCompletion{key: unrecorded.Key{Engine: h.store, ID: c.ID()}, route: route, rec: rec}
			if !h.kept.Keep(kc.key, kc, size) {
				kc = nil
				if !full {
					full = true
					n, b := h.kept.Count()
					maxN, maxB := h.kept.Bound()
					h.logger.Warn("the store has no room for the upstream's result and this gateway keeps no more: it is tried until the lease runs out, then the record is held as outcome unknown",
						zap.String("route", route), zap.String("record_id", c.ID()),
						zap.Int("kept", n), zap.Int64("kept_bytes", b), zap.Int("max_kept", maxN), zap.Int64("max_kept_bytes", maxB))
				}
			} else {
				h.logger.Warn("the store has no room for the upstream's result: the gateway keeps it, renewing its claim, and writes it once the store has room again",
					zap.String("route", route), zap.String("record_id", c.ID()), zap.Error(err))
			}
		}
		if kc == nil && time.Now().Add(pause).After(deadline) {
			h.logger.Error("gave up recording the upstream outcome; the record will surface as outcome unknown",
				zap.String("route", route), zap.String("record_id", c.ID()), zap.String("step", rec.op), zap.Int("tries", tries-1))
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, recordRetryMax)
		if kc == nil {
			var ok bool
			ok, err = h.recordOnce(route, c.ID(), rec)
			if err == nil {
				h.recorded(route, c.ID(), rec.op, ok, zap.Int("tries", tries))
				return
			}
		} else {
			pause = min(pause, c.Lease()/3) // a try at each renewal
			if time.Since(renewed) >= c.Lease()/3 {
				h.renewKept(c)
				renewed = time.Now()
			}
			var done bool
			if done, err = h.writeKept(kc, zap.Int("tries", tries)); done {
				return
			}
		}
		h.logger.Debug("recording the upstream outcome failed again", zap.String("record_id", c.ID()), zap.Int("try", tries), zap.Error(err))
	}
}

// recorded logs a later try that reached the store: ok, or the claim was
// lost. how says which try it was.
func (h *Handler) recorded(route, id, op string, ok bool, how zap.Field) {
	if !ok {
		h.claimLost(route, id, op)
		return
	}
	h.logger.Info("recorded the upstream outcome after retrying",
		zap.String("route", route), zap.String("record_id", id), zap.String("step", op), how)
}

// writeKept tries to write a kept completion once; done when it is
// written (or its claim was lost), by this try or an earlier one. how
// says who tries, for the log.
func (h *Handler) writeKept(kc *keptCompletion, how zap.Field) (done bool, err error) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if kc.done {
		return true, nil
	}
	ok, err := h.recordOnce(kc.route, kc.key.ID, kc.rec)
	if err != nil {
		return false, err
	}
	kc.done = true
	h.kept.Forget(kc)
	h.recorded(kc.route, kc.key.ID, kc.rec.op, ok, how)
	return true, nil
}

// renewKept renews the claim of a kept completion, so the record stays
// in flight (not outcome unknown) until its result is written. It may
// fail for want of room, as the completion did.
func (h *Handler) renewKept(c *store.Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), h.opTimeout())
	defer cancel()
	began := time.Now()
	ok, err := c.Renew(ctx)
	h.metrics.ObserveStore("renew", began, err)
	if err != nil || !ok {
		h.logger.Debug("renewing the claim of a kept result", zap.String("record_id", c.ID()), zap.Bool("renewed", ok), zap.Error(err))
	}
}

// retriesExhausted counts and logs an operation held because its
// executions used up the route's retry budget.
func (h *Handler) retriesExhausted(rt *route, id string) {
	h.metrics.Exhausted.WithLabelValues(rt.Name).Inc()
	h.logger.Warn("retries exhausted: the operation is held for an operator; nothing is forwarded until one acts",
		zap.String("route", rt.Name), zap.String("record_id", id), zap.String("owner", rt.Owner),
		zap.Int("max_executions", rt.MaxExecutions))
}

func (h *Handler) claimLost(route, id, op string) {
	h.logger.Warn("the claim was taken over while the upstream call ran; its outcome was not recorded",
		zap.String("route", route), zap.String("record_id", id), zap.String("step", op))
}
