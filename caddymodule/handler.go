package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
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
)

// guarded is one request that matched a route: what the log line and the
// metrics say about it.
type guarded struct {
	rt      *route
	start   time.Time
	id      string // key id; the key itself is never logged
	outcome string
	status  int
	rec     *store.Record
	now     time.Time   // the store's clock at the claim: lease times compare with it
	check   store.Check // the route's check resolved from the request (zero: none)
	note    string
	would   string          // observe mode: what enforce would have done (see observe)
	waited  time.Duration   // on_in_flight wait: how long it waited for the first request
	span    trace.Span      // the request's span when Caddy's tracing is on
	repl    *caddy.Replacer // the request's placeholders, nil outside Caddy
}

// ServeHTTP guards the request if a route matches it:
// match route → derive key → claim → forward → record → complete.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	rt, target := h.match(r)
	if rt == nil {
		return next.ServeHTTP(w, r)
	}
	// The config may be replaced while this request runs: its store stays
	// open until the request is done with it.
	h.enter()
	defer h.leave()
	g := &guarded{rt: rt, start: time.Now(), span: trace.SpanFromContext(r.Context())}
	g.repl, _ = r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	defer h.decided(g)

	buf, err := readBody(r, rt.MaxBody)
	defer buf.release()
	if err != nil {
		g.outcome = outcomeInvalid
		return h.reject(g, w, err)
	}
	body := buf.bytes()
	// The method as the route matched it: a retry sent as `post` is the
	// same request as POST (it is forwarded as sent).
	method := strings.ToUpper(r.Method)
	in := keying.NewInput(method, r.Header, r.URL.RawQuery, body)
	in.SetTarget(target)

	key, idx, err := keying.DeriveKey(rt.Key, in)
	if err != nil && rt.observing() {
		return h.observe(g, w, r, next, "", &buf, wouldInvalid)
	}
	if errors.Is(err, keying.ErrInvalidKey) {
		// A key header in two field lines, a list or a malformed
		// Structured Field string: never the first of several keys.
		g.outcome = outcomeInvalid
		return h.problem(g, w, probKeyInvalid.with(err.Error(), rt.Name))
	}
	if err != nil {
		g.outcome = outcomeInvalid
		return h.reject(g, w, err)
	}
	if idx < 0 {
		if rt.RequireKey && rt.observing() {
			return h.observe(g, w, r, next, "", &buf, wouldMissingKey)
		}
		if rt.RequireKey {
			g.outcome = outcomeMissingKey
			p := probKeyMissing.with("no key template could be resolved from the request; tried: "+rt.templates, rt.Name)
			p.Tried = rt.templateList()
			return h.problem(g, w, p)
		}
		g.outcome = outcomeBypassed
		buf.forward(r)
		return next.ServeHTTP(w, r)
	}
	if err := keying.ValidateKey(key); err != nil {
		if rt.observing() {
			return h.observe(g, w, r, next, "", &buf, wouldInvalid)
		}
		g.outcome = outcomeInvalid
		return h.problem(g, w, probKeyInvalid.with(err.Error(), rt.Name))
	}
	fp, err := keying.Fingerprint(method, rt.Operation, in, rt.Fingerprint)
	if err != nil && rt.observing() {
		return h.observe(g, w, r, next, key, &buf, wouldInvalid)
	}
	if err != nil {
		g.outcome = outcomeInvalid
		return h.reject(g, w, err)
	}
	g.id = h.ids.KeyID(rt.Operation, keying.ScopeHash(rt.Scope, in), key)
	g.check = h.resolveCheck(rt, key, g.id, in)

	wt := h.watch(rt, g.id)
	defer wt.stop()
	claim, err := h.claim(r.Context(), g, method, in, fp)
	if err == nil && claim == nil {
		// A held record on a verify route: ask the upstream first.
		claim, err = h.verifyHeld(r.Context(), g, method, in, fp)
	}
	if err == nil && claim == nil && h.shouldWait(wt, g, method, in, fp) {
		claim, err = h.await(r.Context(), g, wt, method, in, fp)
	}
	if err != nil {
		return h.storeFailed(g, w, r, next, &buf, err)
	}
	if claim == nil && rt.observing() {
		return h.observe(g, w, r, next, key, &buf, h.wouldAnswer(g, h.sameFingerprint(g.rec, method, rt, in, fp)))
	}
	if claim == nil {
		return h.answer(g, w, method, in, fp)
	}
	wt.stop() // the request runs itself: it waits for nothing
	return h.execute(g, w, r, next, key, &buf, claim)
}

// storeFailed handles a store that could not be reached at claim time.
func (h *Handler) storeFailed(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *requestBody, err error) error {
	g.outcome = outcomeStoreError
	g.note = err.Error()
	h.metrics.storeErrors.WithLabelValues(g.rt.Name, "claim").Inc()
	if errors.Is(err, store.ErrReplicasShort) {
		// wait_strict: the store is up, a replica is not; forwarding
		// unguarded would defeat the mode on every route.
		return h.problem(g, w, probStoreDown.with("too few replicas acknowledged the claim (wait_strict); the request was not forwarded", g.rt.Name))
	}
	if g.rt.OnStoreError == config.OnStoreErrorFailOpen || g.rt.observing() {
		g.note = "forwarded unguarded: " + g.note
		body.forward(r)
		return next.ServeHTTP(w, r)
	}
	return h.problem(g, w, probStoreDown.with("the idempotency store cannot be reached; the request was not forwarded", g.rt.Name))
}

// reject answers a request whose body or key cannot be used.
func (h *Handler) reject(g *guarded, w http.ResponseWriter, err error) error {
	switch {
	case errors.Is(err, errTooLarge):
		return h.problem(g, w, probTooLarge.with(fmt.Sprintf("the request body exceeds %d bytes", g.rt.MaxBody), g.rt.Name))
	case errors.Is(err, keying.ErrTooDeep):
		return h.problem(g, w, probTooDeep.with(fmt.Sprintf("the request body nests arrays and objects deeper than %d levels; nothing was forwarded", keying.MaxDepth), g.rt.Name))
	case errors.Is(err, keying.ErrMalformedJSON):
		return h.problem(g, w, probBadJSON.with("route "+g.rt.Name+" reads fields of the request body, which is not valid JSON", g.rt.Name))
	default:
		return h.problem(g, w, probBadBody.with("the request body could not be read", g.rt.Name))
	}
}

func (h *Handler) problem(g *guarded, w http.ResponseWriter, p problem) error {
	g.status = p.Status
	return p.write(w)
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
	h.metrics.requests.WithLabelValues(g.rt.Name, g.outcome).Inc()
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
		fields := make([]zap.Field, 0, 12)
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
