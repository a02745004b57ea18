// Package exchange holds the bytes of one exchange with the upstream: the
// request body read whole within max_body into a pooled buffer and
// forwarded from it, and the upstream's response captured, held back until
// it is recorded, and classified (what it means for its claim).
package exchange

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/idemgate/idemgate/keying"
)

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

// ErrBusy: the request body would take the bytes of request bodies the
// process holds past its budget (max_buffered). Nothing was claimed.
var ErrBusy = errors.New("too many request body bytes are held at once")

// buffered is the bytes of request bodies the process holds now, whatever
// handler or config read them: one count for the whole process, so that it
// outlives config reloads and bounds every site's handler together.
var buffered atomic.Int64

// Buffered returns the bytes of request bodies the process holds now.
func Buffered() int64 { return buffered.Load() }

// reserve counts n more bytes held, unless budget is positive and the
// count would pass it; it reports whether it counted them.
func reserve(n, budget int64) bool {
	if budget <= 0 {
		buffered.Add(n)
		return true
	}
	for {
		cur := buffered.Load()
		if cur+n > budget {
			return false
		}
		if buffered.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// unreserve counts n bytes no longer held.
func unreserve(n int64) {
	if n != 0 {
		buffered.Add(-n)
	}
}

// ErrTooLarge: the request body is longer than the route's max_body.
var ErrTooLarge = errors.New("request body too large")

// Body is the body of a guarded request, read whole into a pooled
// buffer: the bytes the key and the fingerprint are computed from and, once
// forwarded, the body the rest of the chain reads.
//
// The buffer goes back to the pool exactly once, when nothing can read it
// any more. A body that was never forwarded is given back when ServeHTTP
// returns (Release). A forwarded one is shared with whoever reads it:
// Go's transport may go on sending a request body after RoundTrip returned
// (an upstream that answered early), even after ServeHTTP returned, and
// closes the body when it is done with it. The buffer then goes back when
// both ServeHTTP has returned and the body was closed.
type Body struct {
	buf  *[]byte   // pooled; nil once forwarded (sent owns it) or released
	sent *sentBody // the forwarded body; nil until forward
	held int64     // the bytes counted against the budget, until the buffer goes back
}

// readChunk is how much of a body of unknown length is read, and counted
// against the budget, at a time.
const readChunk = 64 << 10

// ReadBody reads the whole request body, at most limit bytes, into a
// pooled buffer; the caller calls Release when it is done with the
// request, on every path. A body with a Content-Length is read into a
// buffer of that size (and one byte more, to see its end), so it is held
// once; a body of unknown length grows the buffer geometrically, never
// beyond limit+1 bytes. A body longer than limit is not read beyond
// limit+1 bytes. Read whole, the body's bytes come with it, for the key
// and the fingerprint: they must not be used after Forward or Release.
//
// The body's bytes count against the process's budget of buffered
// request bodies (see Buffered) until the buffer goes back to the pool.
// A body whose Content-Length would take the count past budget is not
// read at all, one of unknown length is counted as it is read: either
// way ReadBody returns ErrBusy when the budget is used up. A budget of 0
// counts the body but never refuses it.
func ReadBody(r *http.Request, limit, budget int64) (Body, []byte, error) {
	rb := Body{buf: getBuffer()}
	if r.ContentLength > limit {
		return rb, nil, ErrTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return rb, nil, nil
	}
	known := r.ContentLength >= 0
	if known {
		if !reserve(r.ContentLength, budget) {
			return rb, nil, ErrBusy
		}
		rb.held = r.ContentLength
	}
	b := *rb.buf
	if known && int64(cap(b)) <= r.ContentLength {
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
		end := cap(b)
		if !known {
			// Counted before the bytes land, a chunk at a time; what the
			// read did not fill is given back.
			end = min(end, len(b)+readChunk)
			if !reserve(int64(end-len(b)), budget) {
				*rb.buf = b
				return rb, nil, ErrBusy
			}
		}
		var n int
		n, err = r.Body.Read(b[len(b):end])
		if !known {
			unreserve(int64(end - len(b) - n))
			rb.held += int64(n)
		}
		b = b[:len(b)+n]
	}
	*rb.buf = b
	switch {
	case int64(len(b)) > limit:
		return rb, nil, ErrTooLarge
	case err == io.EOF:
		return rb, b, nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return rb, nil, ErrTooLarge
	}
	return rb, nil, fmt.Errorf("reading request body: %w", err)
}

// bytes returns the body. It must not be used after forward or release.
func (rb *Body) bytes() []byte {
	if rb.buf == nil {
		return nil
	}
	return *rb.buf
}

// Forward puts the body back on the request for the rest of the chain, with
// its length, and hands the buffer over to it: from now on the buffer goes
// back to the pool only once the body was closed (or was never touched)
// and ServeHTTP returned. An empty body becomes http.NoBody and needs no
// buffer.
func (rb *Body) Forward(r *http.Request) {
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
	rb.sent = &sentBody{buf: rb.buf, size: len(body), held: rb.held}
	rb.buf, rb.held = nil, 0
	r.Body = rb.sent
}

// ForUpstream readies a claimed request for its one upstream call: the
// body forwarded, the key in header keyHeader (none when it is "").
// r is the handler's own copy of the request: its header map is cloned
// before it is changed, so the request that Caddy's logs write (its error
// log, access logs) keeps the client's header names, which their filters
// name, and never shows the forwarded key under another name.
func (rb *Body) ForUpstream(r *http.Request, keyHeader, key string) {
	r.Header = r.Header.Clone()
	rb.Forward(r)
	if keyHeader != "" {
		// As the IETF Idempotency-Key draft requires of a client: a
		// Structured Field string. A valid key always has one.
		if sf, err := keying.FormatKeyHeader(key); err == nil {
			r.Header.Set(keyHeader, sf)
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

// Release is ServeHTTP's end with the body, on every path.
func (rb *Body) Release() {
	switch {
	case rb.sent != nil:
		rb.sent.handlerDone()
	case rb.buf != nil:
		putBuffer(rb.buf)
		rb.buf = nil
		unreserve(rb.held)
		rb.held = 0
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
	held     int64   // the bytes counted against the budget, given back with buf
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
// request's bytes. So is one read to its end (later reads get io.EOF
// without the buffer), whether or not its reader closes it: a handler
// that reads a body and never closes it must not keep its bytes counted
// against max_buffered for ever. Only a body still being read (by a
// transport sending it, which always closes it) waits for its Close.
func (b *sentBody) handlerDone() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.returned = true
	if !b.touched || b.off >= b.size {
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
		unreserve(b.held)
		b.held = 0
	}
}

// Interface guard
var _ io.ReadCloser = (*sentBody)(nil)
