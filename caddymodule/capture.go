package caddymodule

import (
	"crypto/sha256"
	"hash"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

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
	c.header = storableHeader(hdr)
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
