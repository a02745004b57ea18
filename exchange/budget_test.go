package exchange

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// chunked is a body of unknown length (no Content-Length), read a few
// bytes at a time.
type chunked struct{ r io.Reader }

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), 1000)]) }

// TestBudget: a body counts against the process's budget of buffered
// request bodies from the moment it is read until its buffer goes back;
// a body whose Content-Length would pass the budget is refused (ErrBusy)
// before a byte is read, one of unknown length as soon as what was read
// would pass it; a forwarded body counts until it was closed and the
// handler returned. Not parallel: the count is the process's.
func TestBudget(t *testing.T) {
	base := Buffered()
	held := func(t *testing.T, want int64) {
		t.Helper()
		if got := Buffered() - base; got != want {
			t.Errorf("held %d bytes, want %d", got, want)
		}
	}
	body := strings.Repeat("x", 10_000)

	t.Run("known length", func(t *testing.T) {
		r := httptest.NewRequest("POST", "/x", strings.NewReader(body))
		rb, b, err := ReadBody(r, 1<<20, base+25_000)
		if err != nil || len(b) != len(body) {
			t.Fatalf("read %d bytes, %v", len(b), err)
		}
		held(t, 10_000)
		r2 := httptest.NewRequest("POST", "/x", strings.NewReader(body))
		rb2, _, err := ReadBody(r2, 1<<20, base+25_000)
		held(t, 20_000)
		r3 := httptest.NewRequest("POST", "/x", strings.NewReader(body))
		rb3, _, err3 := ReadBody(r3, 1<<20, base+25_000)
		if !errors.Is(err3, ErrBusy) {
			t.Errorf("third body past the budget: %v, want ErrBusy", err3)
		}
		if rest, _ := io.ReadAll(r3.Body); len(rest) != len(body) {
			t.Errorf("the refused body was read: %d of %d bytes left", len(rest), len(body))
		}
		held(t, 20_000)
		rb3.Release()
		rb2.Release()
		rb.Release()
		held(t, 0)
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("unknown length", func(t *testing.T) {
		r := httptest.NewRequest("POST", "/x", chunked{strings.NewReader(body)})
		r.ContentLength = -1
		rb, b, err := ReadBody(r, 1<<20, 0)
		if err != nil || string(b) != body {
			t.Fatalf("read %d bytes, %v", len(b), err)
		}
		held(t, 10_000)
		rb.Release()
		held(t, 0)

		// Refused part way: what was read stays counted until released.
		r = httptest.NewRequest("POST", "/x", chunked{strings.NewReader(strings.Repeat("y", 200_000))})
		r.ContentLength = -1
		rb, _, err = ReadBody(r, 1<<20, base+100_000)
		if !errors.Is(err, ErrBusy) {
			t.Errorf("200 KB of unknown length under a 100 KB budget: %v, want ErrBusy", err)
		}
		if got := Buffered() - base; got <= 0 || got > 100_000 {
			t.Errorf("held %d bytes when refused, want some, at most the budget", got)
		}
		rb.Release()
		held(t, 0)
	})

	t.Run("forwarded", func(t *testing.T) {
		r := httptest.NewRequest("POST", "/x", strings.NewReader(body))
		rb, _, err := ReadBody(r, 1<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		rb.Forward(r)
		if _, err := io.ReadFull(r.Body, make([]byte, 4000)); err != nil {
			t.Fatal(err)
		}
		rb.Release() // the handler returned; the transport is still sending the body
		held(t, 10_000)
		_ = r.Body.Close()
		held(t, 0)
	})

	t.Run("forwarded, read whole and never closed", func(t *testing.T) {
		r := httptest.NewRequest("POST", "/x", strings.NewReader(body))
		rb, _, err := ReadBody(r, 1<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		rb.Forward(r)
		if b, err := io.ReadAll(r.Body); err != nil || len(b) != len(body) {
			t.Fatalf("read %d bytes, %v", len(b), err)
		}
		held(t, 10_000)
		rb.Release()
		held(t, 0)
		if n, err := r.Body.Read(make([]byte, 10)); n != 0 || err != io.EOF {
			t.Errorf("a read after the end: %d, %v; want 0, EOF", n, err)
		}
	})
}
