package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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
	now     time.Time // the Redis clock at the claim: lease times compare with it
	note    string
	span    trace.Span // the request's span when Caddy's tracing is on
}

// ServeHTTP guards the request if a route matches it:
// match route → derive key → claim → forward → record → complete.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	rt := h.match(r)
	if rt == nil {
		return next.ServeHTTP(w, r)
	}
	// The config may be replaced while this request runs: its store stays
	// open until the request is done with it.
	h.enter()
	defer h.leave()
	g := &guarded{rt: rt, start: time.Now(), span: trace.SpanFromContext(r.Context())}
	defer h.decided(g)

	buf, err := readBody(r, rt.MaxBody)
	defer buf.release()
	if err != nil {
		g.outcome = outcomeInvalid
		return h.reject(g, w, err)
	}
	body := buf.bytes()
	in := keying.NewInput(r.Method, r.Header, r.URL.RawQuery, body)

	key, idx, err := keying.DeriveKey(rt.Key, in)
	if err != nil {
		g.outcome = outcomeInvalid
		return h.reject(g, w, err)
	}
	if idx < 0 {
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
		g.outcome = outcomeInvalid
		return h.problem(g, w, probKeyInvalid.with(err.Error(), rt.Name))
	}
	fp, err := keying.Fingerprint(r.Method, rt.Operation, in, rt.Fingerprint)
	if err != nil {
		g.outcome = outcomeInvalid
		return h.reject(g, w, err)
	}
	g.id = keying.KeyID(rt.Operation, keying.ScopeHash(rt.Scope, in), key)

	claim, err := h.claim(r.Context(), g, fp, g.rt.fpRule)
	if err == nil {
		// A released record made under an earlier fingerprint rule is
		// taken over only with the fingerprint that rule gives.
		if oldFP, ok := h.claimableUnderOldRule(claim, g.rt, r.Method, in); ok {
			claim, err = h.claim(r.Context(), g, oldFP, claim.Record.FingerprintRule)
		}
	}
	if err != nil {
		return h.storeFailed(g, w, r, next, &buf, err)
	}
	g.rec, g.now = claim.Record, claim.Now
	if !claim.Claimed {
		return h.answer(g, w, r, in, fp)
	}
	return h.execute(g, w, r, next, key, &buf, claim.Record.Token)
}

// claim takes the right to execute the key, or returns its record.
func (h *Handler) claim(ctx context.Context, g *guarded, fp, fpRule string) (store.ClaimResult, error) {
	req := store.ClaimRequest{
		ID:              g.id,
		Route:           g.rt.Name,
		Operation:       g.rt.Operation,
		Fingerprint:     fp,
		FingerprintRule: fpRule,
		Token:           store.NewToken(),
		Lease:           g.rt.LockLease,
		HoldTTL:         g.rt.HoldTTL,
		OnExpired:       expiredPolicy(g.rt.OnUnknownOutcome),
	}
	// The claim must not be abandoned halfway because the client hung up:
	// a claim that landed but whose answer was lost would sit until its
	// lease ran out. The store bounds every call by op_timeout itself.
	began := time.Now()
	res, err := h.store.Claim(context.WithoutCancel(ctx), req)
	h.metrics.observeStore("claim", began, err)
	if err != nil {
		// The script may have run even though its answer was lost: give
		// the claim back so it does not wait out its lease as "unknown".
		h.enter()
		go h.releaseLost(g.id, req.Token, g.rt.TTL)
		return res, fmt.Errorf("claiming key %s: %w", g.id, err)
	}
	if res.Claimed && res.Record != nil {
		res.Record.Token = req.Token
	}
	return res, nil
}

// expiredPolicy says what a claim does with a record whose lease ran out:
// the gateway that held it died mid-call, so the outcome is unknown.
func expiredPolicy(onUnknown string) string {
	if onUnknown == "release" {
		return "release"
	}
	return "hold"
}

// answer responds from an existing record: replay, conflict or mismatch.
func (h *Handler) answer(g *guarded, w http.ResponseWriter, r *http.Request, in *keying.Input, fp string) error {
	rec := g.rec
	if !h.sameFingerprint(rec, r.Method, g.rt, in, fp) {
		g.outcome = outcomeMismatch
		p := probKeyReused.with(fmt.Sprintf("this key was first used with a different request payload on route %s; nothing was forwarded", g.rt.Name), g.rt.Name)
		p.RecordID = rec.ID
		return h.problem(g, w, p)
	}
	switch rec.State {
	case store.StateCompleted:
		g.outcome = outcomeReplayed
		g.status = rec.Status
		return replay(w, rec)
	case store.StateUnknown:
		g.outcome = outcomeUnknown
		p := probUnknown.with("an earlier attempt reached the upstream but its outcome is not known; an operator must release or complete record "+rec.ID, g.rt.Name)
		p.RecordID = rec.ID
		return h.problem(g, w, p)
	default:
		g.outcome = outcomeInFlight
		p := probInFlight.with("the first request with this key is still being processed; retry later", g.rt.Name)
		// Redis's clock, not this gateway's: instances with skewed clocks
		// give the same hint.
		if left := rec.LeaseUntil.Sub(g.now); left > time.Second {
			p.retryAfter = int(min(left, g.rt.LockLease).Seconds())
		}
		return h.problem(g, w, p)
	}
}

// sameFingerprint compares the request with the record, under the
// fingerprint rule that made the record: a reload that changed the rule
// must not turn a genuine retry into a mismatch.
func (h *Handler) sameFingerprint(rec *store.Record, method string, rt *route, in *keying.Input, fp string) bool {
	if rec.FingerprintRule == rt.fpRule {
		return rec.Fingerprint == fp
	}
	_, same := h.fingerprintUnder(rec, method, in)
	return same
}

// fingerprintUnder computes the request's fingerprint under the rule that
// made rec, and whether it equals the record's.
func (h *Handler) fingerprintUnder(rec *store.Record, method string, in *keying.Input) (string, bool) {
	rule, err := keying.ParseFingerprintRule(rec.FingerprintRule)
	if err != nil {
		h.logger.Warn("record has an unreadable fingerprint rule", zap.String("key_id", rec.ID), zap.Error(err))
		return "", false
	}
	fp, err := keying.Fingerprint(method, rec.Operation, in, rule)
	return fp, err == nil && fp == rec.Fingerprint
}

// claimableUnderOldRule returns the fingerprint to claim with when an
// unclaimed record could be taken over (released, or its lease ran out) but
// was made under an earlier fingerprint rule that gives this request the
// record's fingerprint. Lease
// expiry is judged as the claim script judges it, by the Redis clock the
// script ran at (lease_until <= now), never by this gateway's clock.
func (h *Handler) claimableUnderOldRule(res store.ClaimResult, rt *route, method string, in *keying.Input) (oldFP string, ok bool) {
	rec := res.Record
	if res.Claimed || rec == nil || rec.FingerprintRule == rt.fpRule {
		return "", false
	}
	expired := rec.State == store.StateInFlight && !rec.LeaseUntil.After(res.Now)
	if rec.State != store.StateReleased && !expired {
		return "", false
	}
	return h.fingerprintUnder(rec, method, in)
}

// replay writes a stored response: status, headers and body as they were,
// plus Idempotent-Replayed.
func replay(w http.ResponseWriter, rec *store.Record) error {
	hdr := w.Header()
	for name, values := range rec.Header {
		hdr[name] = values
	}
	hdr.Set("Idempotent-Replayed", "true")
	if rec.BodyOmitted {
		hdr.Set("Idempotent-Body-Omitted", "true")
	}
	hdr.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	w.WriteHeader(rec.Status)
	_, err := w.Write(rec.Body)
	return err
}

// execute forwards a claimed request once and records what came back.
func (h *Handler) execute(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, key string, body *requestBody, token string) error {
	prepareUpstream(r, g.rt, key, body)
	// A client that hangs up must not cancel the call: it finishes, and
	// its result is stored for the client's retry.
	r = r.WithContext(context.WithoutCancel(r.Context()))

	cw := newCapture(w, g.rt.MaxResponse)
	defer cw.release()

	stopRenewing := h.renewWhileRunning(g.id, token, g.rt.LockLease)
	panicked, err := callNext(next, cw, r)
	stopRenewing()

	h.settle(g, token, cw, classify(g.rt, cw, err, panicked))
	if panicked != nil {
		panic(panicked)
	}
	return err
}

// callNext runs the rest of the chain, catching a panic (reverse_proxy
// aborts a broken response with http.ErrAbortHandler) so the outcome can
// be recorded before it is re-raised.
func callNext(next caddyhttp.Handler, w http.ResponseWriter, r *http.Request) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, next.ServeHTTP(w, r)
}

// renewWhileRunning extends the claim's lease while the upstream call is
// alive, so a slow live call is never mistaken for a dead one. Calls that
// finish within a third of the lease cost no renewal: nothing runs before
// then but a timer (no goroutine per call). stop returns once no renewal
// is running and none will start.
func (h *Handler) renewWhileRunning(id, token string, lease time.Duration) (stop func()) {
	rn := &renewal{h: h, id: id, token: token, lease: lease}
	rn.mu.Lock() // renew reads rn.timer
	rn.timer = time.AfterFunc(lease/3, rn.renew)
	rn.mu.Unlock()
	return rn.stop
}

// renewal is the lease renewal of one running call.
type renewal struct {
	h         *Handler
	id, token string
	lease     time.Duration

	mu      sync.Mutex // held while a renewal runs
	timer   *time.Timer
	stopped bool
}

// renew runs on the timer's goroutine, a third of the lease after the call
// started or after the last renewal.
func (rn *renewal) renew() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.stopped {
		return
	}
	h := rn.h
	ctx, cancel := context.WithTimeout(context.Background(), h.opTimeout())
	began := time.Now()
	ok, err := h.store.Renew(ctx, rn.id, rn.token, rn.lease)
	cancel()
	h.metrics.observeStore("renew", began, err)
	switch {
	case err != nil:
		h.logger.Warn("renewing a claim failed", zap.String("key_id", rn.id), zap.Error(err))
	case !ok:
		h.logger.Warn("claim lost while the upstream call was running", zap.String("key_id", rn.id))
		return
	}
	rn.timer.Reset(rn.lease / 3)
}

func (rn *renewal) stop() {
	rn.timer.Stop()
	rn.mu.Lock() // wait for a renewal under way
	rn.stopped = true
	rn.mu.Unlock()
}

// releaseLost gives back a claim whose answer may have been lost.
// It runs in the background and leaves the handler when done.
func (h *Handler) releaseLost(id, token string, ttl time.Duration) {
	defer h.leave()
	ctx, cancel := context.WithTimeout(context.Background(), h.opTimeout())
	defer cancel()
	_, _ = h.store.Release(ctx, id, token, ttl)
}

// storeFailed handles a store that could not be reached at claim time.
func (h *Handler) storeFailed(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *requestBody, err error) error {
	g.outcome = outcomeStoreError
	g.note = err.Error()
	h.metrics.storeErrors.WithLabelValues(g.rt.Name, "claim").Inc()
	if g.rt.OnStoreError == "fail_open" {
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

// decided writes the decision's log line, counts it, and sets it on the
// request's span when tracing is on.
func (h *Handler) decided(g *guarded) {
	h.metrics.requests.WithLabelValues(g.rt.Name, g.outcome).Inc()
	if g.span.IsRecording() {
		g.span.SetAttributes(
			attribute.String("idempotency.route", g.rt.Name),
			attribute.String("idempotency.key_id", g.id),
			attribute.String("idempotency.outcome", g.outcome),
			attribute.Bool("idempotency.replayed", g.outcome == outcomeReplayed),
		)
	}
	if ce := h.logger.Check(zapcore.InfoLevel, "idempotency decision"); ce != nil {
		fields := make([]zap.Field, 0, 9)
		fields = append(fields,
			zap.String("route", g.rt.Name),
			zap.String("key_id", g.id),
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
		ce.Write(fields...)
	}
}

// prepareUpstream readies a claimed request for its one upstream call.
func prepareUpstream(r *http.Request, rt *route, key string, body *requestBody) {
	body.forward(r)
	if rt.ForwardKeyHeader != "" {
		r.Header.Set(rt.ForwardKeyHeader, key)
	}
	hideReplayHints(r.Header)
}

// hideReplayHints keeps Go's http.Transport from resending the request on
// its own. The transport treats a request as replayable when its body is
// empty and it has an "Idempotency-Key" or "X-Idempotency-Key" header, and
// then silently sends it again when a reused connection breaks, after the
// upstream may already have acted. Header names are case-insensitive on
// the wire, so moving the values under lower-case map keys keeps them for
// the upstream and out of the transport's check.
func hideReplayHints(h http.Header) {
	for _, name := range [...]string{"Idempotency-Key", "X-Idempotency-Key"} {
		if v, ok := h[name]; ok {
			delete(h, name)
			h[lowerASCII(name)] = v
		}
	}
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
