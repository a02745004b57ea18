// Package verify settles, with the upstream, the outcome of records held
// as unknown on routes with a verify rule: the lookup and its verdicts
// (lookup.go), the schedule of checks (schedule.go) and the fenced
// checks themselves (verifier.go). The idempotency handler and the
// operator service use it; it knows neither, only the store contract,
// the routes' config and the small Use and Metrics interfaces below.
package verify

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// Verifier settles, with the upstream, the outcome of records a handler
// held as unknown, on routes with a verify rule. The claim keeps the
// check resolved from the request on the record (method and URL; the
// headers come from the route's config when a check runs). The gateway
// that saw the ambiguity schedules checks (Schedule: after, then every,
// up to attempts); a retry that finds the record held runs one check
// first (Settle); an operator may run one at any time (CheckOutcome).
// Each check is fenced by the store (a store.CheckLease): one at a time
// per record, and its verdict lands only while the record is still held
// under the claim it was made for.
//
// A Verifier belongs to one provisioned handler: it checks with that
// config's rules and keeps that config's store open while a schedule
// runs. Its parts: the lookup and its verdicts (lookup.go),
// the schedule (schedule.go), and here the checks themselves.
type Verifier struct {
	store     store.Engine
	routes    []*config.Resolved
	use       Use
	opTimeout time.Duration
	client    *http.Client
	logger    *zap.Logger
	metrics   Metrics
}

// Use is a handler's use of its store: a check or a schedule enters it
// while it runs, so that the store stays open until it is done.
type Use interface {
	Enter()
	Leave()
}

// Metrics is where a Verifier reports its store calls.
type Metrics interface {
	// ObserveStore observes the duration of store call op.
	ObserveStore(op string, began time.Time, err error)
	// StoreError counts a failed store call op of route.
	StoreError(route, op string)
}

// Config is what a Verifier works with: one provisioned handler's store,
// routes, use of the store, store call bound, logger and metrics.
type Config struct {
	Store     store.Engine
	Routes    []*config.Resolved
	Use       Use
	OpTimeout time.Duration
	Logger    *zap.Logger
	Metrics   Metrics
}

// New returns the verifier of one provisioned handler.
func New(c Config) *Verifier {
	return &Verifier{
		store: c.Store, routes: c.Routes, use: c.Use, opTimeout: c.OpTimeout,
		client: lookupClient, logger: c.Logger, metrics: c.Metrics,
	}
}

// Verifications counts the Verifier's checks by route and verdict: a
// process-wide collector, registered with the handlers' metrics.
var Verifications = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "idemgate",
	Name:      "verifications_total",
	Help:      "Checks of records held as outcome unknown, by route and verdict (applied, not_applied, inconclusive, error).",
}, []string{"route", "verdict"})

// Why a check ran, in logs.
const (
	checkScheduled = "schedule"
	checkRetry     = "retry"
	checkOperator  = "operator"
)

// checkRun is one check's result.
type checkRun struct {
	rec     *store.Record // the record after the check (or as found when none ran)
	ran     bool          // the check lease was ours and the check was recorded
	verdict string        // what the check found (when ran)
}

// Settle runs the inline check of a retry on route rt that found its
// record rec held as outcome unknown, within the verify rule's timeout,
// with the headers of the route that made the claim; fallback is the
// check resolved from the retry, for a record that carries none. When
// another check of the record is running, it waits for that one instead.
// It returns the record after the check: completed (a verified result to
// replay), released (the retry claims again), held (the retry gets 409
// naming the next check), or nil (gone: the retry claims afresh). A store
// failure leaves the record as found. note says what happened, for the
// decision's log line.
func (v *Verifier) Settle(ctx context.Context, rt *config.Resolved, rec *store.Record, fallback store.Check) (after *store.Record, note string) {
	rule := rt
	if other := v.routeNamed(rec.Route); other != nil && other.Verify != nil {
		rule = other // the headers of the route that made the claim
	}
	run, err := v.check(rule, rec.Fence(), fallback, false, checkRetry, nil)
	if err != nil {
		v.metrics.StoreError(rt.Name, "check")
		return rec, "verification check failed: " + err.Error()
	}
	if !run.ran && rec.Fence().Holds(run.rec) {
		run.rec = v.awaitCheck(ctx, rule, run.rec)
	}
	if run.ran {
		note = "verified: " + run.verdict
	}
	return run.rec, note
}

// checkPoll is how often a retry looks at a record whose check another
// request is running.
const checkPoll = 50 * time.Millisecond

// awaitCheck waits, within the rule's timeout, for the check another
// request holds the lease of to end, polling the record; it returns the
// record as last read.
func (v *Verifier) awaitCheck(ctx context.Context, rt *config.Resolved, rec *store.Record) *store.Record {
	if !rec.CheckLeaseUntil.After(time.Now().Add(-time.Second)) {
		return rec
	}
	deadline := time.Now().Add(rt.Verify.Timeout + v.opTimeout)
	t := time.NewTimer(checkPoll)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return rec
		case <-t.C:
		}
		cur, err := v.store.Get(ctx, rec.ID)
		if err != nil {
			return rec
		}
		if cur == nil || cur.State != store.StateUnknown || cur.CheckLeaseUntil.IsZero() {
			return cur
		}
		rec = cur
		t.Reset(checkPoll)
	}
	return rec
}

// routeNamed returns the verifier's route of that name, or nil.
func (v *Verifier) routeNamed(name string) *config.Resolved {
	for _, rt := range v.routes {
		if rt.Name == name {
			return rt
		}
	}
	return nil
}

// Verifiable refuses, as a store.ErrConflict, a record an operator's
// check cannot run on: one not held as outcome unknown, or one that
// carries no check.
func Verifiable(rec *store.Record) error {
	switch {
	case rec.Class() != store.StateUnknown:
		return fmt.Errorf("%w: record %s is %s: only a record held as outcome unknown is verified", store.ErrConflict, rec.ID, rec.Class())
	case rec.Check.IsZero():
		return fmt.Errorf("%w: record %s carries no check (it was held before its route had a verify rule): release or complete it", store.ErrConflict, rec.ID)
	}
	return nil
}

// CheckOutcome runs one check of held record rec now, on operator act's
// word: it asks the upstream, with route rt's verify rule, whether the
// operation happened, and returns the record after it and the verdict. A record that is not held, carries no check, has a check
// running or was resolved while the check ran is a store.ErrConflict
// (with the current record, when there is one); a missing one
// store.ErrNotFound.
func (v *Verifier) CheckOutcome(rt *config.Resolved, rec *store.Record, act store.Action) (*store.Record, string, error) {
	if err := Verifiable(rec); err != nil {
		return rec, "", err
	}
	v.use.Enter()
	defer v.use.Leave()
	run, err := v.check(rt, rec.Fence(), store.Check{}, false, checkOperator, &act)
	switch {
	case err != nil:
		return nil, "", err
	case run.rec == nil:
		return nil, "", fmt.Errorf("%w: %s", store.ErrNotFound, rec.ID)
	case !run.ran && rec.Fence().Holds(run.rec):
		return run.rec, "", fmt.Errorf("%w: a check of record %s is running; look again in a moment", store.ErrConflict, rec.ID)
	case !run.ran:
		return run.rec, "", fmt.Errorf("%w: record %s was resolved while the check ran (it is %s now); the check changed nothing", store.ErrConflict, rec.ID, run.rec.State)
	}
	return run.rec, run.verdict, nil
}

// checkLease is how long a check may hold its record's check lease: the
// lookup's timeout and the store calls around it.
func (v *Verifier) checkLease(rt *config.Resolved) time.Duration {
	return rt.Verify.Timeout + 2*v.opTimeout + time.Second
}

// check runs one check of the record held as held, with route rt's
// verify rule: takes the check lease (only when due, if asked), asks the
// upstream, and records the verdict. fallback is the check to run when
// the record carries none; op is the operator who asked for it (nil for
// the gateway's own checks). A store failure is an error; a lookup
// failure is a verdict.
func (v *Verifier) check(rt *config.Resolved, held store.Fence, fallback store.Check, due bool, why string, op *store.Action) (checkRun, error) {
	rule := rt.Verify
	ctx, cancel := context.WithTimeout(context.Background(), v.opTimeout)
	began := time.Now()
	lease, rec, err := store.BeginCheck(ctx, v.store, held, v.checkLease(rt), due)
	cancel()
	v.metrics.ObserveStore("begin_check", began, err)
	if lease == nil {
		return checkRun{rec: rec}, err
	}
	chk := rec.Check
	if chk.IsZero() {
		chk = fallback
	}
	started := time.Now()
	entry, res, note := v.lookup(rt, chk)
	next := time.Duration(0)
	if rec.CheckCount+1 < int64(rule.Attempts) {
		next = rule.Every
	}
	ctx, cancel = context.WithTimeout(context.Background(), v.opTimeout)
	began = time.Now()
	after, ok, err := lease.End(ctx, store.CheckReport{
		Entry: entry, Result: res,
		NotFoundChecks: rule.NotFoundChecks, Every: rule.Every, Next: next, TTL: rt.TTL, Tombstone: rt.TombstoneTTL,
		Operator: op,
	})
	cancel()
	v.metrics.ObserveStore("end_check", began, err)
	Verifications.WithLabelValues(rt.Name, entry.Verdict).Inc()
	fields := []zap.Field{
		zap.String("route", rt.Name), zap.String("record_id", held.ID()), zap.String("trigger", why),
		zap.String("verdict", entry.Verdict), zap.Int("status", entry.Status),
		zap.Duration("duration", time.Since(started)),
	}
	if note != "" {
		fields = append(fields, zap.String("note", note))
	}
	switch {
	case err != nil:
		v.logger.Warn("verification check ran but recording it failed; the record stays held", append(fields, zap.Error(err))...)
		return checkRun{rec: rec}, err
	case !ok:
		// An operator or a late real result resolved the record while the
		// check ran, or the lease ran out and another check took over.
		v.logger.Info("verification check came too late; the record was resolved meanwhile", fields...)
		return checkRun{rec: after}, nil
	}
	result := "held"
	switch after.State {
	case store.StateCompleted:
		result = "completed"
	case store.StateReleased:
		result = "released"
	}
	fields = append(fields, zap.String("record", result), zap.Int64("checks", after.CheckCount))
	if !after.NextCheck.IsZero() {
		fields = append(fields, zap.Time("next_check", after.NextCheck.UTC()))
	}
	v.logger.Info("verification check", fields...)
	return checkRun{rec: after, ran: true, verdict: entry.Verdict}, nil
}
