package caddymodule

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idemgate/idemgate/breaker"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/redrive"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/verify"
)

// Decision outcomes, as counted in metrics and written to logs.
const (
	outcomeExecuted   = "executed"
	outcomeReplayed   = "replayed"
	outcomeInFlight   = "in_flight"
	outcomeMismatch   = "mismatch"
	outcomeMissingKey = "missing_key"
	outcomeUnknown    = "unknown_outcome"
	outcomeStoreError = "store_error"
	outcomeBypassed   = "bypassed"
	outcomeInvalid    = "invalid_request"
	// outcomeBreakerOpen: the route's breaker refused a new execution.
	outcomeBreakerOpen = "breaker_open"
	// outcomeExhausted: the operation used up its retry budget and is
	// held for an operator.
	outcomeExhausted = "retries_exhausted"
)

// guarded is one request that matched a route: what the log line and the
// metrics say about it.
type guarded struct {
	rt  *route
	brk *breaker.Breaker // the route's breaker; nil: none
	// The request as the key and the fingerprint read it: its method
	// (upper case), its parsed input, its key ("" until valid) and its
	// fingerprint.
	method  string
	in      *keying.Input
	key     string
	keyFrom int // the index of the route's key template the key came from
	fp      string
	start   time.Time
	id      string // key id; the key itself is never logged
	outcome string
	status  int
	rec     *store.Record
	now     time.Time   // the store's clock at the claim: lease times compare with it
	check   store.Check // the route's check resolved from the request (zero: none)
	note    string
	probe   bool             // the request carries its route's breaker probe
	refused time.Duration    // the route's breaker refuses new executions for this long (0: it does not)
	sealed  []byte           // the request sealed for a re-drive (keep_request), else nil
	payload string           // the operation's PayloadID on a route with same_payload_window, else ""
	late    *store.Tombstone // the tombstone of the key's expired record its claim found, if any
	twin    *store.Twin      // the operation completed with this payload under another key, if any
	would   string           // observe mode: what enforce would have done (see observe)
	waited  time.Duration    // on_in_flight wait: how long it waited for the first request
	span    trace.Span       // the request's span when Caddy's tracing is on
	call    *toolCall        // the MCP tool call (a route with protocol: mcp), else nil
	repl    *caddy.Replacer  // the request's placeholders, nil outside Caddy
}

// ServeHTTP guards the request if a route matches it: it reads the body
// within max_body and max_buffered, decides once what to do with the request (decide) and
// acts on that decision in one place (act), in enforce and observe mode
// alike. docs/request-path.md lists one execute's way function by
// function.
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
	g := &guarded{rt: rt, brk: h.runtime(rt).breaker, start: time.Now(), span: trace.SpanFromContext(r.Context())}
	g.repl, _ = r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)

	body, raw, err := exchange.ReadBody(r, rt.MaxBody, h.bufferBudget)
	defer body.Release()
	if err == nil && rt.tools != nil && !h.toolCall(g, r, raw) {
		// Not a guarded tool call: on its way, never stored.
		return h.passOn(w, r, next, &body, raw)
	}
	defer h.decided(g)
	if errors.Is(err, exchange.ErrBusy) {
		return h.busy(g, w)
	}
	if err != nil {
		return h.act(g, decision{kind: decideReject, err: err}, w, r, next, &body)
	}
	return h.act(g, h.decide(g, r, next, target, raw), w, r, next, &body)
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
}

// runtime is what h keeps at run time for its route rt.
func (h *Handler) runtime(rt *route) *routeRuntime {
	if rt.idx < len(h.live) && h.routes[rt.idx] == rt {
		return &h.live[rt.idx]
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
	// decideStoreFailed: the store could not claim (see storeFailed).
	decideStoreFailed
)

// decision is the one decision about a guarded request.
type decision struct {
	kind decisionKind
	// would is what enforce does, as observe mode counts it: on a route
	// that observes, a decision with a would forwards the request
	// unguarded instead (observe). "": the decision holds in both modes.
	would   string
	outcome string          // decideProblem: the decision's outcome
	p       problem.Problem // decideProblem
	err     error           // decideReject, decideStoreFailed
	claim   *store.Claim    // decideExecute; decideBreakerOpen: a claim to give back unused
}

// decide takes the request's key, fingerprint and id onto g and claims
// the key, and says what to do with the request, whose body (read whole
// within max_body) is body. It sends nothing to the client.
func (h *Handler) decide(g *guarded, r *http.Request, next caddyhttp.Handler, target string, body []byte) decision {
	rt := g.rt
	if g.call != nil && g.call.ambiguous {
		return ambiguousCall(rt)
	}
	// The method as the route matched it: a retry sent as `post` is the
	// same request as POST (it is forwarded as sent).
	g.method = strings.ToUpper(r.Method)
	g.in = keying.NewInput(g.method, r.Header, r.URL.RawQuery, body)
	g.in.SetTarget(target)
	var scope [32]byte
	if rt.sig != nil {
		var refused *decision
		if scope, refused = h.verifySignature(g, r, body); refused != nil {
			return *refused
		}
	} else {
		scope = keying.ScopeHash(rt.Scope, g.in)
	}

	key, idx, err := keying.DeriveKey(rt.Key, g.in)
	switch {
	case errors.Is(err, keying.ErrInvalidKey):
		// A key header in two field lines, a list or a malformed
		// Structured Field string: never the first of several keys.
		return decision{kind: decideProblem, would: metrics.WouldInvalid, outcome: outcomeInvalid, p: problem.KeyInvalid.With(err.Error(), rt.Name)}
	case err != nil:
		return decision{kind: decideReject, would: metrics.WouldInvalid, err: err}
	case idx < 0 && rt.RequireKey:
		p := problem.KeyMissing.With("no key template could be resolved from the request; tried: "+rt.templates, rt.Name)
		p.Tried = rt.templateList()
		return decision{kind: decideProblem, would: metrics.WouldMissingKey, outcome: outcomeMissingKey, p: p}
	case idx < 0:
		return decision{kind: decidePass}
	}
	if err := keying.ValidateKey(key); err != nil {
		return decision{kind: decideProblem, would: metrics.WouldInvalid, outcome: outcomeInvalid, p: problem.KeyInvalid.With(err.Error(), rt.Name)}
	}
	g.key, g.keyFrom = key, idx
	if g.fp, err = keying.Fingerprint(g.method, rt.Operation, g.in, rt.Fingerprint); err != nil {
		return decision{kind: decideReject, would: metrics.WouldInvalid, err: err}
	}
	g.id = h.ids.KeyID(rt.Operation, scope, key)
	if rt.SamePayloadWindow > 0 {
		g.payload = h.ids.PayloadID(rt.Operation, scope, g.fp)
	}
	if rt.Verify != nil {
		g.check = h.resolveCheck(rt, key, g.id, g.in)
	}
	if rt.KeepRequest {
		g.sealed = h.keep(g, r, key, body)
		h.remember(rt, next, r)
	}

	if g.brk != nil {
		g.probe, g.refused = g.brk.Admit()
		if g.refused > 0 && !rt.observing() && h.wouldExecute(r.Context(), g.id) {
			return decision{kind: decideBreakerOpen}
		}
	}
	claim, err := h.claim(r.Context(), g)
	if (claim == nil || err != nil) && g.brk != nil {
		g.brk.Cancel(g.probe)
	}
	if claim != nil && err == nil && g.brk != nil && !g.probe && g.refused == 0 && !rt.observing() {
		// The breaker may have opened between its answer and the claim
		// (an execution that failed meanwhile released the record): it
		// is asked again, now that the claim is held.
		g.probe, g.refused = g.brk.Admit()
	}
	switch {
	case errors.Is(err, errBreakerOpen):
		return decision{kind: decideBreakerOpen}
	case err != nil:
		return decision{kind: decideStoreFailed, err: err}
	case claim == nil && g.rec == nil:
		// The store created nothing: a late retry or a payload completed
		// under another key, refused.
		return decision{kind: decideAnswer, would: g.refusedWould()}
	case claim == nil && rt.observing():
		return decision{kind: decideAnswer, would: h.wouldAnswer(g, h.sameFingerprint(g, g.rec))}
	case claim == nil:
		return decision{kind: decideAnswer}
	case g.refused > 0 && !rt.observing():
		// The breaker opened meanwhile, or the record turned out to be
		// claimable: the claim goes back unused.
		return decision{kind: decideBreakerOpen, claim: claim}
	}
	return decision{kind: decideExecute, claim: claim}
}

// observing reports whether the route only observes.
func (rt *route) observing() bool { return rt.Mode == config.ModeObserve }

// act carries out decision d: the one place a guarded request is
// answered, forwarded or executed. On a route that observes, a decision
// that enforce would answer itself forwards the request unguarded.
func (h *Handler) act(g *guarded, d decision, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body) error {
	if d.would != "" && g.rt.observing() {
		return h.observe(g, w, r, next, body, d.would)
	}
	switch d.kind {
	case decidePass:
		g.outcome = outcomeBypassed
		body.Forward(r)
		return next.ServeHTTP(w, r)
	case decideProblem:
		g.outcome = d.outcome
		return h.problem(g, w, d.p)
	case decideReject:
		g.outcome = outcomeInvalid
		return h.reject(g, w, d.err)
	case decideBreakerOpen:
		if d.claim != nil {
			h.use.Enter()
			go h.releaseLost(d.claim)
		}
		return h.breakerOpen(g, w)
	case decideStoreFailed:
		return h.storeFailed(g, w, r, next, body, d.err)
	case decideAnswer:
		return h.answer(g, w)
	}
	return h.execute(g, w, r, next, body, d.claim)
}

// resolveCheck resolves the route's verify rule from the request, for the
// claim to keep on the record (verify.ResolveCheck); a request it cannot
// be resolved from leaves the record without a check, held for an
// operator as without verify.
func (h *Handler) resolveCheck(rt *route, key, id string, in *keying.Input) store.Check {
	chk, part, err := verify.ResolveCheck(rt.Verify, key, id, in)
	if part != "" {
		h.logger.Debug("verify: the check cannot be resolved from this request; an unknown outcome will be held for an operator",
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
func (h *Handler) decided(g *guarded) {
	h.metrics.Requests.WithLabelValues(g.rt.Name, g.outcome).Inc()
	if g.repl != nil {
		g.repl.Set(placeholderRoute, g.rt.Name)
		g.repl.Set(placeholderRecordID, g.id)
		g.repl.Set(placeholderOutcome, g.outcome)
		g.repl.Set(placeholderReplayed, g.outcome == outcomeReplayed)
	}
	if g.span.IsRecording() {
		g.span.SetAttributes(
			attribute.String("idempotency.route", g.rt.Name),
			attribute.String("idempotency.record_id", g.id),
			attribute.String("idempotency.outcome", g.outcome),
			attribute.Bool("idempotency.replayed", g.outcome == outcomeReplayed),
		)
	}
	if ce := h.logger.Check(zapcore.InfoLevel, "idempotency decision"); ce != nil {
		fields := make([]zap.Field, 0, 13)
		fields = append(fields,
			zap.String("route", g.rt.Name),
			zap.String("record_id", g.id),
			zap.String("outcome", g.outcome),
			zap.Int("status", g.status),
			zap.Duration("duration", time.Since(g.start)),
		)
		if g.rec != nil {
			fields = append(fields, zap.Int64("attempt", g.rec.Attempts), zap.Int64("executions", g.rec.Executions))
		}
		if g.note != "" {
			fields = append(fields, zap.String("note", g.note))
		}
		if g.rt.Owner != "" {
			fields = append(fields, zap.String("owner", g.rt.Owner))
		}
		if g.rt.observing() {
			fields = append(fields, zap.String("mode", string(config.ModeObserve)))
		}
		if g.would != "" {
			fields = append(fields, zap.String("would", g.would))
		}
		if g.waited > 0 {
			fields = append(fields, zap.Duration("waited", g.waited))
		}
		ce.Write(fields...)
	}
}
