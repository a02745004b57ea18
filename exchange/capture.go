package exchange

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/tidwall/gjson"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// Capture receives a guarded response from the upstream, keeping a
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
type Capture struct {
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
	summed    [sha256.Size]byte // the digest's sum, kept here so summing allocates nothing
	overflow  bool              // body exceeded max: only status, headers and digest are kept
	streaming bool              // an event stream: never replayable
	passing   bool              // the status went to the client: the rest passes through as it comes
	clientErr error
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

// NewCapture captures the response written to w, holding back at most
// max bytes of its body.
func NewCapture(w http.ResponseWriter, max int64) *Capture {
	return &Capture{
		ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
		max:                   max, buf: getBuffer(), digest: sha256.New(), declared: -1,
	}
}

func (c *Capture) WriteHeader(status int) {
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
func (c *Capture) writeClientHeader(status int) {
	if c.clientErr == nil {
		c.ResponseWriter.WriteHeader(status)
	}
}

// pass sends what is held back to the client, and lets the rest of the
// response through as it comes.
func (c *Capture) pass() {
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
func (c *Capture) writeClient(p []byte) {
	if c.clientErr == nil {
		if _, err := c.ResponseWriter.Write(p); err != nil {
			c.clientErr = err
		}
	}
}

// Deliver sends a held-back response to the client, once the result is
// recorded. The names the response announced in Trailer stay out of the
// header block (the upstream's trailers were added to the header map after
// the body): they are sent as trailers when the request ends.
func (c *Capture) Deliver() {
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
func (c *Capture) sizeFor(contentLength string) {
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
		c.Release()
	case int64(cap(*c.buf)) < n:
		*c.buf = make([]byte, 0, n)
	}
}

func (c *Capture) Write(p []byte) (int, error) {
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
			c.Release()
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
func (c *Capture) FlushError() error {
	if c.clientErr != nil || !c.passing {
		return nil
	}
	if err := http.NewResponseController(c.ResponseWriter).Flush(); err != nil {
		c.clientErr = err
	}
	return nil
}

// Flush implements http.Flusher.
func (c *Capture) Flush() { _ = c.FlushError() }

// ReadFrom copies through Write, so every byte is digested and bounded
// (the wrapper's ReadFrom would hand r to the client's writer directly).
func (c *Capture) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{c}, r)
}

// writerOnly hides every method but Write, so io.Copy cannot take a
// shortcut around it.
type writerOnly struct{ io.Writer }

// body returns the captured body; nil when it overflowed.
func (c *Capture) body() []byte {
	if c.buf == nil {
		return nil
	}
	return *c.buf
}

func (c *Capture) sum() []byte { return c.digest.Sum(c.summed[:0]) }

// short reports whether fewer bytes came than the Content-Length announced.
func (c *Capture) short() bool { return c.declared >= 0 && c.size < c.declared }

// Release returns the pooled buffer; the capture is unusable afterwards.
func (c *Capture) Release() {
	putBuffer(c.buf)
	c.buf = nil
}

// Interface guards
var (
	_ http.ResponseWriter = (*Capture)(nil)
	_ http.Flusher        = (*Capture)(nil)
	_ io.ReaderFrom       = (*Capture)(nil)
)

// Verdict is what an upstream call means for its claim.
type Verdict int

const (
	// VerdictComplete: a result to store and replay.
	VerdictComplete Verdict = iota
	// VerdictRelease: the upstream said "not done" (a retry status, a
	// 307 or 308 redirect) or never received the request; the next retry
	// executes.
	VerdictRelease
	// VerdictUnknown: the upstream may have acted and nobody knows; the
	// route's on_unknown_outcome decides.
	VerdictUnknown
)

// Result classifies one upstream call: what it means for its claim.
type Result struct {
	Verdict Verdict
	Status  int    // the status the client got (or the handler error's)
	Reason  string // why a claim is released or held
	// CutOff: the response broke off (aborted mid-body, shorter than its
	// Content-Length, an error after the status went out) or never had a
	// status. It is never stored as a result, whatever the route's
	// on_unknown_outcome: a replay would serve a truncated or invented
	// response as if it were the upstream's.
	CutOff bool
}

// Rules are what a route says about its upstream's answers.
type Rules struct {
	// Retry are the statuses that mean "not done" (retry.statuses).
	Retry map[int]bool
	// OnRedirect is what a 307 or 308 means (on_redirect).
	OnRedirect config.OnRedirect
	// ExternalID is the path of the id the upstream gave the result
	// (external_id), read from a JSON body.
	ExternalID string
}

// RulesOf compiles a route's rules for its answers.
func RulesOf(res *config.Resolved) Rules {
	r := Rules{Retry: make(map[int]bool, len(res.RetryStatuses)), OnRedirect: res.OnRedirect, ExternalID: res.ExternalID}
	for _, s := range res.RetryStatuses {
		r.Retry[s] = true
	}
	return r
}

// Outcome is what the captured call means for its claim (classify) and
// the result it leaves for replays if it is recorded as completed.
func (c *Capture) Outcome(rules Rules, err error, panicked any) (Result, store.Result) {
	out := classify(rules, c, err, panicked)
	return out, storedResult(rules, c, out)
}

// classify tells a stored result from "never sent" from "sent, no answer".
func classify(rules Rules, cw *Capture, err error, panicked any) Result {
	switch {
	case panicked != nil:
		// reverse_proxy aborts with http.ErrAbortHandler when the upstream's
		// body breaks after the status went out.
		return Result{VerdictUnknown, cw.status, "response_aborted", true}
	case err != nil:
		if cw.status == 0 && neverSent(err) {
			return Result{VerdictRelease, errorStatus(err), "not_sent", false}
		}
		return Result{VerdictUnknown, errorStatus(err), "upstream_error", true}
	case cw.short():
		return Result{VerdictUnknown, cw.status, "response_cut_off", true}
	case cw.status == 0:
		// Nothing written: the server answers 200 with an empty body.
		return Result{VerdictComplete, http.StatusOK, "", false}
	case cw.status == http.StatusSwitchingProtocols:
		return Result{VerdictRelease, cw.status, "switching_protocols", false}
	case cw.status == 499:
		return Result{VerdictUnknown, cw.status, "client_closed", true}
	case rules.Retry[cw.status]:
		return Result{VerdictRelease, cw.status, "retry_status", false}
	case isRedirect(cw.status) && rules.OnRedirect != config.OnRedirectStore:
		// The upstream asks for the same request at another URL: it did
		// nothing here, and the redirected request runs under this key.
		return Result{VerdictRelease, cw.status, "redirect", false}
	case cw.status >= 500:
		return Result{VerdictUnknown, cw.status, "upstream_5xx", false}
	default:
		return Result{VerdictComplete, cw.status, "", false}
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

// hexDigest is sum in lowercase hex, as hex.EncodeToString writes it,
// with the encoding on the stack: the string is the one allocation.
func hexDigest(sum []byte) string {
	var out [2 * sha256.Size]byte
	return string(hex.AppendEncode(out[:0], sum))
}

// storedResult is what a completed call leaves for replays.
func storedResult(rules Rules, cw *Capture, out Result) store.Result {
	res := store.Result{
		Status: out.Status,
		Header: cw.header, // already storable (see capture.WriteHeader)
		Digest: hexDigest(cw.sum()),
	}
	if cw.overflow || cw.streaming {
		res.BodyOmitted = true
	} else {
		res.Body = cw.body()
	}
	if rules.ExternalID != "" && res.Body != nil {
		if v := gjson.GetBytes(res.Body, rules.ExternalID); v.Exists() && store.ValidExternalID(v.String()) {
			res.ExternalID = v.String()
		}
	}
	return res
}
