package exchange

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// readRequestBody reads body through readBody as the handler does.
func readRequestBody(t *testing.T, body string) (*http.Request, Body) {
	t.Helper()
	r := httptest.NewRequest("POST", "/x", strings.NewReader(body))
	rb, _, err := ReadBody(r, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r, rb
}

// TestRequestBodyGivenBack: the pooled buffer goes back exactly when
// nothing can read it any more: at ServeHTTP's end for a body never
// forwarded (or empty, or never touched by the rest of the chain);
// otherwise once ServeHTTP returned and the body was closed, in either
// order. Reads after that read nothing, never pooled memory.
func TestRequestBodyGivenBack(t *testing.T) {
	t.Parallel()
	const text = "0123456789"
	readAll := func(t *testing.T, b io.Reader) string {
		t.Helper()
		got, err := io.ReadAll(b)
		if err != nil {
			t.Fatalf("reading the forwarded body: %v", err)
		}
		return string(got)
	}
	sent := func(t *testing.T, r *http.Request) *sentBody {
		t.Helper()
		sb, ok := r.Body.(*sentBody)
		if !ok {
			t.Fatalf("forwarded body is %T", r.Body)
		}
		return sb
	}
	held := func(sb *sentBody) bool {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		return sb.buf != nil
	}

	t.Run("never forwarded", func(t *testing.T) {
		_, rb := readRequestBody(t, text)
		if string(rb.bytes()) != text {
			t.Fatalf("read %q", rb.bytes())
		}
		rb.Release()
		rb.Release()
		if rb.buf != nil {
			t.Error("buffer kept after release")
		}
	})
	t.Run("empty body is forwarded as http.NoBody", func(t *testing.T) {
		r, rb := readRequestBody(t, "")
		rb.Forward(r)
		if r.Body != http.NoBody || r.ContentLength != 0 || r.Header.Get("Content-Length") != "0" {
			t.Errorf("body %T, length %d, header %q", r.Body, r.ContentLength, r.Header.Get("Content-Length"))
		}
		rb.Release()
		if rb.buf != nil {
			t.Error("buffer kept after release")
		}
	})
	t.Run("closed before ServeHTTP returns", func(t *testing.T) {
		r, rb := readRequestBody(t, text)
		rb.Forward(r)
		if r.ContentLength != int64(len(text)) || r.Header.Get("Content-Length") != "10" || r.GetBody != nil {
			t.Errorf("length %d, header %q, GetBody set: %v", r.ContentLength, r.Header.Get("Content-Length"), r.GetBody != nil)
		}
		sb := sent(t, r)
		if got := readAll(t, r.Body); got != text {
			t.Fatalf("forwarded %q", got)
		}
		_ = r.Body.Close()
		_ = r.Body.Close()
		if !held(sb) {
			t.Fatal("buffer given back while ServeHTTP still holds it")
		}
		rb.Release()
		if held(sb) {
			t.Error("buffer kept after Close and release")
		}
		if n, err := r.Body.Read(make([]byte, 4)); n != 0 || err != io.EOF {
			t.Errorf("Read after the end = %d, %v; want 0, EOF", n, err)
		}
	})
	t.Run("still being read when ServeHTTP returns", func(t *testing.T) {
		r, rb := readRequestBody(t, text)
		rb.Forward(r)
		sb := sent(t, r)
		p := make([]byte, 3)
		if n, _ := r.Body.Read(p); string(p[:n]) != "012" {
			t.Fatalf("first read %q", p[:n])
		}
		rb.Release()
		if !held(sb) {
			t.Fatal("buffer given back while the transport is still reading")
		}
		if got := readAll(t, r.Body); got != text[3:] {
			t.Errorf("rest after ServeHTTP returned: %q", got)
		}
		_ = r.Body.Close()
		if held(sb) {
			t.Error("buffer kept after Close")
		}
	})
	t.Run("closed half read", func(t *testing.T) {
		r, rb := readRequestBody(t, text)
		rb.Forward(r)
		_, _ = r.Body.Read(make([]byte, 3))
		_ = r.Body.Close()
		rb.Release()
		if n, err := r.Body.Read(make([]byte, 4)); n != 0 || err != http.ErrBodyReadAfterClose {
			t.Errorf("Read after Close = %d, %v; want 0, http.ErrBodyReadAfterClose", n, err)
		}
	})
	t.Run("never touched by the rest of the chain", func(t *testing.T) {
		r, rb := readRequestBody(t, text)
		rb.Forward(r)
		sb := sent(t, r)
		rb.Release()
		if held(sb) {
			t.Fatal("buffer of a body nobody read kept after ServeHTTP returned")
		}
		if n, err := r.Body.Read(make([]byte, 4)); n != 0 || err != http.ErrBodyReadAfterClose {
			t.Errorf("late Read = %d, %v; want 0, http.ErrBodyReadAfterClose", n, err)
		}
		_ = r.Body.Close()
	})
	t.Run("Read, Close and release at once", func(t *testing.T) {
		for range 100 {
			r, rb := readRequestBody(t, text)
			rb.Forward(r)
			sb := sent(t, r)
			_, _ = r.Body.Read(make([]byte, 1))
			var wg sync.WaitGroup
			wg.Add(3)
			go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, r.Body) }()
			go func() { defer wg.Done(); _ = r.Body.Close() }()
			go func() { defer wg.Done(); rb.Release() }()
			wg.Wait()
			if held(sb) {
				t.Fatal("buffer kept after Close and release")
			}
		}
	})
}
