package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// execute forwards a claimed request once and records what came back.
func (h *Handler) execute(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, key string, body *requestBody, c *store.Claim) error {
	// A client that hangs up must not cancel the call: it finishes, and
	// its result is stored for the client's retry.
	r = r.WithContext(context.WithoutCancel(r.Context()))
	prepareUpstream(r, g.rt, key, body)

	cw := newCapture(w, g.rt.MaxResponse)
	defer cw.release()

	renewing := h.renewWhileRunning(c)
	panicked, err := callNext(next, cw, r)
	renewing.stop()

	// The upstream's answer is all here (unless it was too large to hold
	// back): record it, then hand it to the client at whatever pace the
	// client reads. A duplicate meanwhile replays it. A response that
	// broke off reaches the client as it came, broken.
	out := classify(g.rt, cw, err, panicked)
	h.record(g, c, out, storedResult(g.rt, cw, out))
	cw.deliver()
	if panicked != nil {
		// Out before the abort closes the connection, or the client
		// would see no answer at all (and its transport might resend).
		_ = cw.FlushError()
		panic(panicked)
	}
	return err
}

// prepareUpstream readies a claimed request for its one upstream call. r
// is the handler's own copy of the request: its header map is cloned
// before it is changed, so the request that Caddy's logs write (its error
// log, access logs) keeps the client's header names, which their filters
// name, and never shows the forwarded key under another name.
func prepareUpstream(r *http.Request, rt *route, key string, body *requestBody) {
	r.Header = r.Header.Clone()
	body.forward(r)
	if rt.ForwardKeyHeader != "" {
		// As the IETF Idempotency-Key draft requires of a client: a
		// Structured Field string. A valid key always has one.
		if sf, err := keying.FormatKeyHeader(key); err == nil {
			r.Header.Set(rt.ForwardKeyHeader, sf)
		}
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
// then but a timer (no goroutine per call). Its stop returns once no
// renewal is running and none will start.
func (h *Handler) renewWhileRunning(c *store.Claim) *renewal {
	rn := &renewal{h: h, claim: c}
	rn.mu.Lock() // renew reads rn.timer
	rn.timer = time.AfterFunc(c.Lease()/3, rn.renew)
	rn.mu.Unlock()
	return rn
}

// renewal is the lease renewal of one running call.
type renewal struct {
	h     *Handler
	claim *store.Claim

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
	ok, err := rn.claim.Renew(ctx)
	cancel()
	h.metrics.ObserveStore("renew", began, err)
	switch {
	case err != nil:
		h.logger.Warn("renewing a claim failed", zap.String("record_id", rn.claim.ID()), zap.Error(err))
	case !ok:
		h.logger.Warn("claim lost while the upstream call was running", zap.String("record_id", rn.claim.ID()))
		return
	}
	rn.timer.Reset(rn.claim.Lease() / 3)
}

func (rn *renewal) stop() {
	rn.timer.Stop()
	rn.mu.Lock() // wait for a renewal under way
	rn.stopped = true
	rn.mu.Unlock()
}

// capture receives a guarded response from the upstream, keeping a
// bounded copy and a SHA-256 digest of the whole body.
//
// A response of at most max bytes is held back from the client until the
// upstream has sent all of it: execute records the result first and then
// delivers it, so a client that reads slowly, or stops reading, never
// keeps the claim in flight, and duplicates replay meanwhile. A response
// that grows past max, an event stream and a protocol switch pass through
// to the client as they arrive (the body of a large one is not stored).
//
// When the client has gone away, writes to it fail; capture then keeps
// accepting the upstream's bytes so the call finishes and its result is
// stored for the client's retry.
type capture struct {
	// The client's writer: Header, Unwrap (for http.ResponseController)
	// and Push come from the wrapper; Write, WriteHeader, ReadFrom and
	// FlushError are capture's own.
	caddyhttp.ResponseWriterWrapper
	max int64

	status    int         // final status; 0 until WriteHeader(>=200)
	header    http.Header // storable copy taken at WriteHeader
	buf       *[]byte     // pooled; nil once the body overflowed or was released
	size      int64
	declared  int64 // the Content-Length announced; -1 when none
	digest    hash.Hash
	overflow  bool // body exceeded max: only status, headers and digest are kept
	streaming bool // an event stream: never replayable
	passing   bool // the status went to the client: the rest passes through as it comes
	clientErr error
}

// bufPool holds the buffers of request bodies and captured responses.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled is the largest buffer kept in the pool.
const maxPooled = 4 << 20

func getBuffer() *[]byte {
	b := bufPool.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

// putBuffer returns b to the pool unless it grew too large to keep.
func putBuffer(b *[]byte) {
	if b == nil || cap(*b) > maxPooled {
		return
	}
	bufPool.Put(b)
}

// appendBounded appends p to b, growing b geometrically but never beyond
// limit bytes of capacity (unless b and p need more), so that a bounded
// buffer never holds more than its bound.
func appendBounded(b, p []byte, limit int64) []byte {
	if need := len(b) + len(p); need > cap(b) {
		c := int64(max(2*cap(b), 4096))
		c = max(min(c, limit), int64(need))
		nb := make([]byte, len(b), c)
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}

func newCapture(w http.ResponseWriter, max int64) *capture {
	return &capture{
		ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
		max:                   max, buf: getBuffer(), digest: sha256.New(), declared: -1,
	}
}

func (c *capture) WriteHeader(status int) {
	if c.status != 0 {
		return // superfluous; the client already has a status
	}
	if status < 200 && status != http.StatusSwitchingProtocols {
		// Informational (100 Continue, 103 Early Hints): to the client
		// now, never stored.
		c.writeClientHeader(status)
		return
	}
	c.status = status
	hdr := c.ResponseWriter.Header()
	c.header = store.StorableHeader(hdr)
	if strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		c.streaming = true
	}
	c.sizeFor(hdr.Get("Content-Length"))
	if c.streaming || c.overflow || status == http.StatusSwitchingProtocols {
		c.pass()
	}
}

// writeClientHeader sends a status to the client, unless it has gone.
func (c *capture) writeClientHeader(status int) {
	if c.clientErr == nil {
		c.ResponseWriter.WriteHeader(status)
	}
}

// pass sends what is held back to the client, and lets the rest of the
// response through as it comes.
func (c *capture) pass() {
	if c.passing {
		return
	}
	c.passing = true
	c.writeClientHeader(c.status)
	if b := c.body(); len(b) > 0 {
		c.writeClient(b)
	}
}

// writeClient writes p to the client, unless it has gone.
func (c *capture) writeClient(p []byte) {
	if c.clientErr == nil {
		if _, err := c.ResponseWriter.Write(p); err != nil {
			c.clientErr = err
		}
	}
}

// deliver sends a held-back response to the client, once the result is
// recorded. The names the response announced in Trailer stay out of the
// header block (the upstream's trailers were added to the header map after
// the body): they are sent as trailers when the request ends.
func (c *capture) deliver() {
	if c.passing || c.status == 0 {
		return
	}
	c.passing = true
	hdr := c.ResponseWriter.Header()
	var trailers http.Header
	for _, v := range hdr["Trailer"] {
		for _, name := range strings.Split(v, ",") {
			name = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name))
			if vv, ok := hdr[name]; ok {
				if trailers == nil {
					trailers = http.Header{}
				}
				trailers[name] = vv
				delete(hdr, name)
			}
		}
	}
	c.writeClientHeader(c.status)
	if b := c.body(); len(b) > 0 {
		c.writeClient(b)
	}
	for name, vv := range trailers {
		hdr[name] = vv
	}
}

// sizeFor prepares the buffer for a body of the announced length: a body
// longer than max is never buffered, one within max gets a buffer of its
// exact size.
func (c *capture) sizeFor(contentLength string) {
	if contentLength == "" || c.buf == nil {
		return
	}
	n, err := strconv.ParseInt(contentLength, 10, 64)
	if err != nil || n < 0 {
		return
	}
	c.declared = n
	switch {
	case n > c.max:
		c.overflow = true
		c.release()
	case int64(cap(*c.buf)) < n:
		*c.buf = make([]byte, 0, n)
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	c.digest.Write(p)
	c.size += int64(len(p))
	if !c.overflow {
		if c.size <= c.max {
			*c.buf = appendBounded(*c.buf, p, c.max)
			if !c.passing {
				return len(p), nil // held back until the result is recorded
			}
		} else {
			// Past max: what was held back goes out, the rest streams
			// through, and only status, headers and digest are kept.
			c.overflow = true
			c.pass()
			c.release()
		}
	}
	if c.passing {
		c.writeClient(p)
	}
	return len(p), nil
}

// FlushError flushes to the client what passes through; a held-back
// response has nothing to flush yet. A client that has gone away is not
// an error for the upstream call.
func (c *capture) FlushError() error {
	if c.clientErr != nil || !c.passing {
		return nil
	}
	if err := http.NewResponseController(c.ResponseWriter).Flush(); err != nil {
		c.clientErr = err
	}
	return nil
}

// Flush implements http.Flusher.
func (c *capture) Flush() { _ = c.FlushError() }

// ReadFrom copies through Write, so every byte is digested and bounded
// (the wrapper's ReadFrom would hand r to the client's writer directly).
func (c *capture) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{c}, r)
}

// writerOnly hides every method but Write, so io.Copy cannot take a
// shortcut around it.
type writerOnly struct{ io.Writer }

// body returns the captured body; nil when it overflowed.
func (c *capture) body() []byte {
	if c.buf == nil {
		return nil
	}
	return *c.buf
}

func (c *capture) sum() []byte { return c.digest.Sum(nil) }

// short reports whether fewer bytes came than the Content-Length announced.
func (c *capture) short() bool { return c.declared >= 0 && c.size < c.declared }

// release returns the pooled buffer; the capture is unusable afterwards.
func (c *capture) release() {
	putBuffer(c.buf)
	c.buf = nil
}

// Interface guards
var (
	_ http.ResponseWriter = (*capture)(nil)
	_ http.Flusher        = (*capture)(nil)
	_ io.ReaderFrom       = (*capture)(nil)
)

// verdict is what an upstream call means for its claim.
type verdict int

const (
	// verdictComplete: a result to store and replay.
	verdictComplete verdict = iota
	// verdictRelease: the upstream said "not done" (a retry status, a
	// 307 or 308 redirect) or never received the request; the next retry
	// executes.
	verdictRelease
	// verdictUnknown: the upstream may have acted and nobody knows; the
	// route's on_unknown_outcome decides.
	verdictUnknown
)

// callResult classifies one upstream call: what it means for its claim.
type callResult struct {
	verdict verdict
	status  int    // the status the client got (or the handler error's)
	reason  string // why a claim is released or held
	// cutOff: the response broke off (aborted mid-body, shorter than its
	// Content-Length, an error after the status went out) or never had a
	// status. It is never stored as a result, whatever the route's
	// on_unknown_outcome: a replay would serve a truncated or invented
	// response as if it were the upstream's.
	cutOff bool
}

// classify tells a stored result from "never sent" from "sent, no answer".
func classify(rt *route, cw *capture, err error, panicked any) callResult {
	switch {
	case panicked != nil:
		// reverse_proxy aborts with http.ErrAbortHandler when the upstream's
		// body breaks after the status went out.
		return callResult{verdictUnknown, cw.status, "response_aborted", true}
	case err != nil:
		if cw.status == 0 && neverSent(err) {
			return callResult{verdictRelease, errorStatus(err), "not_sent", false}
		}
		return callResult{verdictUnknown, errorStatus(err), "upstream_error", true}
	case cw.short():
		return callResult{verdictUnknown, cw.status, "response_cut_off", true}
	case cw.status == 0:
		// Nothing written: the server answers 200 with an empty body.
		return callResult{verdictComplete, http.StatusOK, "", false}
	case cw.status == http.StatusSwitchingProtocols:
		return callResult{verdictRelease, cw.status, "switching_protocols", false}
	case cw.status == 499:
		return callResult{verdictUnknown, cw.status, "client_closed", true}
	case rt.retry[cw.status]:
		return callResult{verdictRelease, cw.status, "retry_status", false}
	case isRedirect(cw.status) && rt.OnRedirect != config.OnRedirectStore:
		// The upstream asks for the same request at another URL: it did
		// nothing here, and the redirected request runs under this key.
		return callResult{verdictRelease, cw.status, "redirect", false}
	case cw.status >= 500:
		return callResult{verdictUnknown, cw.status, "upstream_5xx", false}
	default:
		return callResult{verdictComplete, cw.status, "", false}
	}
}

// isRedirect reports whether status asks for the same request (method and
// body) at another URL: 307 and 308. 301, 302 and 303 let clients switch
// to GET, and are results.
func isRedirect(status int) bool {
	return status == http.StatusTemporaryRedirect || status == http.StatusPermanentRedirect
}

// neverSent reports whether the proxy failed before the request left: a
// dial error, or no upstream available.
func neverSent(err error) bool {
	var de reverseproxy.DialError
	if errors.As(err, &de) {
		return true
	}
	return strings.Contains(err.Error(), "no upstreams available")
}

func errorStatus(err error) int {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return http.StatusBadGateway
}

// storedResult is what a completed call leaves for replays.
func storedResult(rt *route, cw *capture, out callResult) store.Result {
	res := store.Result{
		Status: out.status,
		Header: cw.header, // already storable (see capture.WriteHeader)
		Digest: hex.EncodeToString(cw.sum()),
	}
	if cw.overflow || cw.streaming {
		res.BodyOmitted = true
	} else {
		res.Body = cw.body()
	}
	if rt.ExternalID != "" && res.Body != nil {
		if v := gjson.GetBytes(res.Body, rt.ExternalID); v.Exists() && store.ValidExternalID(v.String()) {
			res.ExternalID = v.String()
		}
	}
	return res
}
