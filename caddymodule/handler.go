package caddymodule

import (
	"errors"
	"maps"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idemgate/idemgate/breaker"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/redrive"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/verify"
)

// request is what the handler keeps of one guarded request besides its
// operation (guard.Operation) and its outcome (guard.Outcome): when it
// began, where its outcome is told (the span, the placeholders), and the
// route's breaker's word on it.
type request struct {
	start time.Time
	span  trace.Span      // the request's span when Caddy's tracing is on
	repl  *caddy.Replacer // the request's placeholders, nil outside Caddy
	adm   guard.Admission
}

// ServeHTTP guards the request if a route matches it: it reads the body
// within max_body and max_buffered, reads the request into its operation
// and claims it (decide), and acts on that decision in one place (act),
// in enforce and observe mode alike. docs/request-path.md lists one
// execute's way function by function.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	i, target := h.matcher.Match(r)
	if i < 0 {
		return next.ServeHTTP(w, r)
	}
	rt := h.routes[i]
	// The config may be replaced while this request runs: its store stays
	// open until the request is done with it.
	h.use.Enter()
	defer h.use.Leave()
	req := &request{start: time.Now(), span: trace.SpanFromContext(r.Context())}
	if b := h.runtime(rt).breaker; b != nil {
		req.adm.Breaker = b
	}
	req.repl, _ = r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)

	body, raw, err := exchange.ReadBody(r, rt.MaxBody, h.bufferBudget)
	defer body.Release()
	var call *guard.ToolCall
	if err == nil && rt.ToolSet != nil {
		if call = toolCall(rt, r, raw); call == nil {
			// Not a guarded tool call: on its way, never stored.
			return h.passOn(w, r, next, &body, raw)
		}
	}
	var op *guard.Operation
	var out guard.Outcome
	defer func() { h.decided(req, rt, op, &out) }()
	switch {
	case errors.Is(err, exchange.ErrBusy):
		op = &guard.Operation{Route: rt}
		return h.act(req, op, decision{kind: decideBusy}, w, r, next, &body, &out)
	case err != nil:
		op = &guard.Operation{Route: rt}
		return h.act(req, op, decision{kind: decideReject, err: err}, w, r, next, &body, &out)
	}
	var d decision
	op, d = h.decide(req, rt, r, next, target, raw, call)
	return h.act(req, op, d, w, r, next, &body, &out)
}

// routeRuntime is what a provisioned handler keeps at run time for one of
// its routes.
type routeRuntime struct {
	breaker *breaker.Breaker // nil: the route has no retry.breaker
	// chain is the rest of the handler chain after the idempotency
	// handler (reverse_proxy and whatever the site puts before it), as
	// the route's last guarded request saw it: where a re-drive goes
	// when the config lookup does not find it.
	chain atomic.Pointer[redrive.Chain]
	// told is what decided tells of the route's outcomes, by outcome
	// name, filled as outcomes first occur (see tell).
	told atomic.Pointer[map[string]told]
}

// told is what decided needs for one outcome of one route, looked up
// once: the route's requests counter for the outcome, and the route's
// and the outcome's names as placeholder values (boxed once, not per
// request).
type told struct {
	requests prometheus.Counter
	route    any
	outcome  any
}

// tell is the route's told for outcome, counted in vec under route: the
// one kept, or looked up now and kept for the next request. A series is
// still created on first use only, as WithLabelValues does.
func (live *routeRuntime) tell(vec *prometheus.CounterVec, route, outcome string) told {
	if m := live.told.Load(); m != nil {
		if t, ok := (*m)[outcome]; ok {
			return t
		}
	}
	t := told{requests: vec.WithLabelValues(route, outcome), route: route, outcome: outcome}
	for {
		old := live.told.Load()
		next := map[string]told{}
		if old != nil {
			next = maps.Clone(*old)
		}
		next[outcome] = t
		if live.told.CompareAndSwap(old, &next) {
			return t
		}
	}
}

// runtime is what h keeps at run time for its route rt.
func (h *Handler) runtime(rt *route) *routeRuntime {
	if rt.Index < len(h.live) && h.routes[rt.Index] == rt {
		return &h.live[rt.Index]
	}
	return &routeRuntime{} // a route built in a test, outside the handler
}

// decisionKind is what the handler does with a guarded request.
type decisionKind int

const (
	// decideExecute: the key is claimed; the request goes upstream once.
	decideExecute decisionKind = iota
	// decidePass: no key, none required; the request goes on unguarded.
	decidePass
	// decideAnswer: the key has a record; the answer comes from it
	// (replay, 409, 422). A duplicate that waited for the first request
	// (on_in_flight: wait) ends here or in decideExecute.
	decideAnswer
	// decideProblem: the request is refused with a problem (a key that
	// is missing or malformed).
	decideProblem
	// decideReject: the body or the key cannot be used (see reject).
	decideReject
	// decideBreakerOpen: the route's breaker refuses a new execution.
	decideBreakerOpen
	// decideStoreFailed: the store could not claim (see
	// guard.Gate.StoreFailed).
	decideStoreFailed
	// decideBusy: the body would have taken the process past
	// max_buffered (see busy).
	decideBusy
)

// decision is the one decision about a guarded request.
type decision struct {
	kind decisionKind
	// would is what enforce does, as observe mode counts it: on a route
	// that observes, a decision with a would forwards the request
	// unguarded instead (observe). "": the decision holds in both modes.
	would   string
	outcome string          // decideProblem: the decision's outcome
	note    string          // decideProblem: why, for the log line
	p       problem.Problem // decideProblem
	err     error           // decideReject, decideStoreFailed
	claim   *store.Claim    // decideExecute; decideBreakerOpen: a claim to give back unused
	found   guard.Found     // what the claim found (decideExecute, decideAnswer, ...)
}

// decide reads the request into its operation (see key.go) and claims
// its key, and says what to do with the request, whose body (read whole
// within max_body) is body. It sends nothing to the client.
func (h *Handler) decide(req *request, rt *route, r *http.Request, next caddyhttp.Handler, target string, body []byte, call *guard.ToolCall) (*guard.Operation, decision) {
	op, refused := h.operation(rt, r, next, target, body, call)
	if refused != nil {
		return op, *refused
	}
	adm := &req.adm
	if adm.Breaker != nil {
		adm.Admit()
		if adm.Refused > 0 && !rt.Observing() && h.gate.WouldExecute(r.Context(), op.ID) {
			return op, decision{kind: decideBreakerOpen}
		}
	}
	claim, found, err := h.gate.Claim(r.Context(), op, adm)
	if (claim == nil || err != nil) && adm.Breaker != nil {
		adm.Cancel()
	}
	if claim != nil && err == nil && adm.Breaker != nil && !adm.Probe && adm.Refused == 0 && !rt.Observing() {
		// The breaker may have opened between its answer and the claim
		// (an execution that failed meanwhile released the record): it
		// is asked again, now that the claim is held.
		adm.Admit()
	}
	d := decision{kind: decideExecute, claim: claim, found: found}
	switch {
	case errors.Is(err, guard.ErrBreakerOpen):
		d.kind = decideBreakerOpen
	case err != nil:
		d.kind, d.err = decideStoreFailed, err
	case claim == nil && found.Record == nil:
		// The store created nothing: a late retry or a payload completed
		// under another key, refused.
		d.kind, d.would = decideAnswer, guard.RefusedWould(rt, &found)
	case claim == nil && rt.Observing():
		d.kind, d.would = decideAnswer, wouldAnswer(found.Record, h.gate.SameFingerprint(op, found.Record))
	case claim == nil:
		d.kind = decideAnswer
	case adm.Refused > 0 && !rt.Observing():
		// The breaker opened meanwhile, or the record turned out to be
		// claimable: the claim goes back unused.
		d.kind = decideBreakerOpen
	}
	return op, d
}

// act carries out decision d on op: the one place a guarded request is
// answered, forwarded or executed, and the one place its outcome (out)
// is set, from what the step that answered returns. On a route that
// observes, a decision that enforce would answer itself forwards the
// request unguarded.
func (h *Handler) act(req *request, op *guard.Operation, d decision, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body, out *guard.Outcome) error {
	if d.would != "" && op.Route.Observing() {
		*out = withFound(guard.Outcome{Name: guard.OutcomeObserved, Would: d.would}, d.found)
		status, err := h.observe(op, w, r, next, body, d.would)
		out.Status = status
		return err
	}
	var o guard.Outcome
	var err error
	switch d.kind {
	case decidePass:
		*out = guard.Outcome{Name: guard.OutcomeBypassed}
		body.Forward(r)
		return next.ServeHTTP(w, r)
	case decideProblem:
		o, err = guard.Refuse(op, w, d.outcome, d.p)
		o.Note = d.note
	case decideReject:
		o, err = guard.Reject(op, w, d.err)
	case decideBusy:
		o, err = h.busy(op, w)
	case decideBreakerOpen:
		if d.claim != nil {
			h.use.Enter()
			go h.gate.ReleaseLost(d.claim)
		}
		o, err = breakerOpen(op, &req.adm, w)
	case decideStoreFailed:
		failed, forward, p := h.gate.StoreFailed(op, d.err)
		if forward {
			*out = withFound(failed, d.found)
			body.Forward(r)
			return next.ServeHTTP(w, r)
		}
		o, err = guard.Refuse(op, w, failed.Name, p)
		o.Note = failed.Note
	case decideAnswer:
		o, err = h.gate.Answer(op, &d.found, w)
	default:
		var panicked any
		o, panicked, err = h.gate.Execute(op, &req.adm, d.claim, w, r, next.ServeHTTP, body)
		if panicked != nil {
			*out = withFound(o, d.found)
			panic(panicked)
		}
	}
	*out = withFound(o, d.found)
	return err
}

// withFound is o with what the claim found: its record, its wait, and
// its note when o has none of its own.
func withFound(o guard.Outcome, f guard.Found) guard.Outcome {
	o.Record, o.Waited = f.Record, f.Waited
	if o.Note == "" {
		o.Note = f.Note
	}
	return o
}

// resolveCheck resolves the route's verify rule from the request, for the
// claim to keep on the record (verify.ResolveCheck); a request it cannot
// be resolved from leaves the record without a check, held for an
// operator as without verify.
func (h *Handler) resolveCheck(rt *route, key, id string, in *keying.Input) store.Check {
	chk, part, err := verify.ResolveCheck(rt.Verify, key, id, in)
	if part != "" {
		h.gate.Logger.Debug("verify: the check cannot be resolved from this request; an unknown outcome will be held for an operator",
			zap.String("route", rt.Name), zap.String("record_id", id), zap.String("part", part), zap.Bool("empty_placeholder", err == nil))
	}
	return chk
}

// Placeholders that the decision sets for the handlers and logs after it
// (access logs, `header`, `handle_errors`).
const (
	placeholderRoute    = "http.idempotency.route"
	placeholderRecordID = "http.idempotency.record_id"
	placeholderOutcome  = "http.idempotency.outcome"
	placeholderReplayed = "http.idempotency.replayed"
)

// decided writes the decision's log line, counts it, sets it on the
// request's placeholders, and on the request's span when tracing is on.
// op is nil when the request was refused before it was read.
func (h *Handler) decided(req *request, rt *route, op *guard.Operation, out *guard.Outcome) {
	id := ""
	if op != nil {
		id = op.ID
	}
	t := h.runtime(rt).tell(h.gate.Metrics.Requests, rt.Name, out.Name)
	t.requests.Inc()
	if req.repl != nil {
		req.repl.Set(placeholderRoute, t.route)
		req.repl.Set(placeholderRecordID, id)
		req.repl.Set(placeholderOutcome, t.outcome)
		req.repl.Set(placeholderReplayed, out.Name == guard.OutcomeReplayed)
	}
	if req.span.IsRecording() {
		req.span.SetAttributes(
			attribute.String("idempotency.route", rt.Name),
			attribute.String("idempotency.record_id", id),
			attribute.String("idempotency.outcome", out.Name),
			attribute.Bool("idempotency.replayed", out.Name == guard.OutcomeReplayed),
		)
	}
	if ce := h.gate.Logger.Check(zapcore.InfoLevel, "idempotency decision"); ce != nil {
		fields := make([]zap.Field, 0, 13)
		fields = append(fields,
			zap.String("route", rt.Name),
			zap.String("record_id", id),
			zap.String("outcome", out.Name),
			zap.Int("status", out.Status),
			zap.Duration("duration", time.Since(req.start)),
		)
		if out.Record != nil {
			fields = append(fields, zap.Int64("attempt", out.Record.Attempts), zap.Int64("executions", out.Record.Executions))
		}
		if out.Note != "" {
			fields = append(fields, zap.String("note", out.Note))
		}
		if rt.Owner != "" {
			fields = append(fields, zap.String("owner", rt.Owner))
		}
		if rt.Mode == config.ModeObserve {
			fields = append(fields, zap.String("mode", string(rt.Mode)))
		}
		if out.Would != "" {
			fields = append(fields, zap.String("would", out.Would))
		}
		if out.Waited > 0 {
			fields = append(fields, zap.Duration("waited", out.Waited))
		}
		ce.Write(fields...)
	}
}
