package caddymodule

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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
	// outcomeBreakerOpen: the route's breaker refused a new execution.
	outcomeBreakerOpen = "breaker_open"
	// outcomeExhausted: the operation used up its retry budget and is
	// held for an operator.
	outcomeExhausted = "retries_exhausted"
)

// guarded is one request that matched a route: what the log line and the
// metrics say about it.
type guarded struct {
	rt      *route
	brk     *breaker // the route's breaker; nil: none
	start   time.Time
	id      string // key id; the key itself is never logged
	outcome string
	status  int
	rec     *store.Record
	now     time.Time   // the store's clock at the claim: lease times compare with it
	check   store.Check // the route's check resolved from the request (zero: none)
	note    string
	probe   bool            // the request carries its route's breaker probe
	refused time.Duration   // the route's breaker refuses new executions for this long (0: it does not)
	sealed  []byte          // the request sealed for a re-drive (keep_request), else nil
	would   string          // observe mode: what enforce would have done (see observe)
	waited  time.Duration   // on_in_flight wait: how long it waited for the first request
	span    trace.Span      // the request's span when Caddy's tracing is on
	repl    *caddy.Replacer // the request's placeholders, nil outside Caddy
}

// ServeHTTP guards the request if a route matches it, top to bottom:
// match (match.go) → key (here: the body read within max_body, the key,
// its id, the fingerprint and the check) → claim, or settle a held record
// with the Verifier (claim.go) → forward (forward.go) → record
// (record.go); or answer from the record (answer.go). docs/request-path.md
// lists one execute's way function by function.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	rt, target := h.match(r)
	if rt == nil {
		return next.ServeHTTP(w, r)
	}
	// The config may be replaced while this request runs: its store stays
	// open until the request is done with it.
	h.use.Enter()
	defer h.use.Leave()
	g := &guarded{rt: rt, brk: h.runtime(rt).breaker, start: time.Now(), span: trace.SpanFromContext(r.Context())}
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
	if rt.KeepRequest {
		g.sealed = h.keep(g, r, key, body)
		h.remember(rt, next, r)
	}

	if g.brk != nil {
		g.probe, g.refused = g.brk.admit()
		if g.refused > 0 && !rt.observing() && h.wouldExecute(r.Context(), g.id) {
			return h.breakerOpen(g, w)
		}
	}
	claim, err := h.claim(r.Context(), g, method, in, fp)
	if (claim == nil || err != nil) && g.brk != nil {
		g.brk.cancel(g.probe)
	}
	if errors.Is(err, errBreakerOpen) {
		return h.breakerOpen(g, w)
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
	if g.refused > 0 && !rt.observing() {
		// The breaker opened meanwhile, or the record turned out to be
		// claimable: give the claim back unused.
		h.use.Enter()
		go h.releaseLost(claim)
		return h.breakerOpen(g, w)
	}
	return h.execute(g, w, r, next, key, &buf, claim)
}

var errTooLarge = errors.New("request body too large")

// requestBody is the body of a guarded request, read whole into a pooled
// buffer: the bytes the key and the fingerprint are computed from and, once
// forwarded, the body the rest of the chain reads.
//
// The buffer goes back to the pool exactly once, when nothing can read it
// any more. A body that was never forwarded is given back when ServeHTTP
// returns (release). A forwarded one is shared with whoever reads it:
// Go's transport may go on sending a request body after RoundTrip returned
// (an upstream that answered early), even after ServeHTTP returned, and
// closes the body when it is done with it. The buffer then goes back when
// both ServeHTTP has returned and the body was closed.
type requestBody struct {
	buf  *[]byte   // pooled; nil once forwarded (sent owns it) or released
	sent *sentBody // the forwarded body; nil until forward
}

// readBody reads the whole request body, at most limit bytes, into a
// pooled buffer; the caller calls release when it is done with the
// request, on every path. A body with a Content-Length is read into a
// buffer of that size (and one byte more, to see its end), so it is held
// once; a body of unknown length grows the buffer geometrically, never
// beyond limit+1 bytes. A body longer than limit is not read beyond
// limit+1 bytes.
func readBody(r *http.Request, limit int64) (requestBody, error) {
	rb := requestBody{buf: getBuffer()}
	if r.ContentLength > limit {
		return rb, errTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return rb, nil
	}
	b := *rb.buf
	if r.ContentLength >= 0 && int64(cap(b)) <= r.ContentLength {
		b = make([]byte, 0, r.ContentLength+1)
	}
	var err error
	for int64(len(b)) <= limit && err == nil {
		if len(b) == cap(b) {
			// Unknown length: double, up to limit+1 bytes (one more than
			// the limit tells a body at the limit from one over it).
			c := max(2*int64(cap(b)), 4096)
			if c >= limit {
				c = limit + 1
			}
			nb := make([]byte, len(b), c)
			copy(nb, b)
			b = nb
		}
		var n int
		n, err = r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
	}
	*rb.buf = b
	switch {
	case int64(len(b)) > limit:
		return rb, errTooLarge
	case err == io.EOF:
		return rb, nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return rb, errTooLarge
	}
	return rb, fmt.Errorf("reading request body: %w", err)
}

// bytes returns the body. It must not be used after forward or release.
func (rb *requestBody) bytes() []byte {
	if rb.buf == nil {
		return nil
	}
	return *rb.buf
}

// forward puts the body back on the request for the rest of the chain, with
// its length, and hands the buffer over to it: from now on the buffer goes
// back to the pool only once the body was closed (or was never touched)
// and ServeHTTP returned. An empty body becomes http.NoBody and needs no
// buffer.
func (rb *requestBody) forward(r *http.Request) {
	body := rb.bytes()
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	// No GetBody: the transport must never send the request again by itself.
	r.GetBody = nil
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	switch {
	case rb.sent != nil:
		r.Body = rb.sent
		return
	case len(body) == 0:
		r.Body = http.NoBody
		return
	}
	rb.sent = &sentBody{buf: rb.buf, size: len(body)}
	rb.buf = nil
	r.Body = rb.sent
}

// release is ServeHTTP's end with the body, on every path.
func (rb *requestBody) release() {
	switch {
	case rb.sent != nil:
		rb.sent.handlerDone()
	case rb.buf != nil:
		putBuffer(rb.buf)
		rb.buf = nil
	}
}

// sentBody is a forwarded request body: an io.ReadCloser over the pooled
// buffer that gives the buffer back once the reader closed it and
// ServeHTTP returned. It is not pooled itself: whoever got it may still
// call it after it gave the buffer back, and then reads nothing.
type sentBody struct {
	mu       sync.Mutex
	buf      *[]byte // nil once given back
	size     int     // the body's length
	off      int     // read position
	touched  bool    // Read or Close was called
	closed   bool    // no more reads: Close was called, or the body was taken back
	returned bool    // ServeHTTP returned
}

// Read reads the body. Once closed it reads nothing: io.EOF if it had been
// read to its end, else http.ErrBodyReadAfterClose.
func (b *sentBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.touched = true
	switch {
	case b.off >= b.size:
		return 0, io.EOF
	case b.closed:
		return 0, http.ErrBodyReadAfterClose
	}
	n := copy(p, (*b.buf)[b.off:b.size])
	b.off += n
	return n, nil
}

// Close ends reading; the buffer goes back to the pool if ServeHTTP has
// returned. Calling it again does nothing.
func (b *sentBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.touched = true
	b.closed = true
	b.giveBack()
	return nil
}

// handlerDone is ServeHTTP returning. A body that nobody read or closed by
// then (the rest of the chain answered without looking at it) is taken
// back, as Go's server takes back its own request bodies when a handler
// returns: a reader that comes later reads nothing, never another
// request's bytes.
func (b *sentBody) handlerDone() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.returned = true
	if !b.touched {
		b.closed = true
	}
	b.giveBack()
}

// giveBack returns the buffer to the pool once the body is closed and
// ServeHTTP returned, at most once. b.mu is held.
func (b *sentBody) giveBack() {
	if b.closed && b.returned && b.buf != nil {
		putBuffer(b.buf)
		b.buf = nil
	}
}

// Interface guard
var _ io.ReadCloser = (*sentBody)(nil)

// resolveCheck resolves the route's check from the request, for the claim
// to keep on the record: its URL and the values of found.match. It is
// zero when the route has none or a placeholder is empty (a lookup for ""
// would find the wrong thing), or a match value is too long or not UTF-8:
// such a record is held for an operator as without verify.
func (h *Handler) resolveCheck(rt *route, key, id string, in *keying.Input) store.Check {
	v := rt.Verify
	if v == nil {
		return store.Check{}
	}
	unresolved := func(what string, err error) store.Check {
		h.logger.Debug("verify: the check cannot be resolved from this request; an unknown outcome will be held for an operator",
			zap.String("route", rt.Name), zap.String("record_id", id), zap.String("part", what), zap.Bool("empty_placeholder", err == nil))
		return store.Check{}
	}
	u, ok, err := v.URL.Resolve(key, id, in)
	if err != nil || !ok {
		return unresolved("url", err)
	}
	chk := store.Check{Method: v.Method, URL: u, After: v.After}
	for _, m := range v.FoundMatch {
		val, ok, err := m.Value.ResolveText(key, id, in)
		if err != nil || !ok {
			return unresolved("found.match", err)
		}
		if len(val) > store.MaxCheckMatchValue || !utf8.ValidString(val) {
			return unresolved("found.match", errors.New("too long or not UTF-8"))
		}
		chk.Match = append(chk.Match, store.CheckMatch{Path: m.Path, Value: val})
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
