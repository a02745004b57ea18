package caddymodule

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
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
