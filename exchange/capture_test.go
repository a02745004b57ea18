package exchange

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/idemgate/idemgate/config"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	// "Result{...}" fields: verdict, status, reason, cut off.
	rt := Rules{Retry: map[int]bool{429: true, 503: true}}
	dial := caddyhttp.Error(http.StatusBadGateway, reverseproxy.DialError{})
	timeout := caddyhttp.Error(http.StatusGatewayTimeout, errors.New("net/http: timeout awaiting response headers"))
	cases := []struct {
		name     string
		status   int
		err      error
		panicked any
		want     Result
	}{
		{"stored 201", 201, nil, nil, Result{VerdictComplete, 201, "", false}},
		{"stored 400", 400, nil, nil, Result{VerdictComplete, 400, "", false}},
		{"nothing written", 0, nil, nil, Result{VerdictComplete, 200, "", false}},
		{"retry status 429", 429, nil, nil, Result{VerdictRelease, 429, "retry_status", false}},
		{"retry status 503", 503, nil, nil, Result{VerdictRelease, 503, "retry_status", false}},
		{"temporary redirect", 307, nil, nil, Result{VerdictRelease, 307, "redirect", false}},
		{"permanent redirect", 308, nil, nil, Result{VerdictRelease, 308, "redirect", false}},
		{"moved permanently is a result", 301, nil, nil, Result{VerdictComplete, 301, "", false}},
		{"found is a result", 302, nil, nil, Result{VerdictComplete, 302, "", false}},
		{"see other is a result", 303, nil, nil, Result{VerdictComplete, 303, "", false}},
		{"upstream 500", 500, nil, nil, Result{VerdictUnknown, 500, "upstream_5xx", false}},
		{"upstream 502", 502, nil, nil, Result{VerdictUnknown, 502, "upstream_5xx", false}},
		{"client closed", 499, nil, nil, Result{VerdictUnknown, 499, "client_closed", true}},
		{"switching protocols", 101, nil, nil, Result{VerdictRelease, 101, "switching_protocols", false}},
		{"dial error: never sent", 0, dial, nil, Result{VerdictRelease, 502, "not_sent", false}},
		{"no upstreams", 0, caddyhttp.Error(503, errors.New("no upstreams available")), nil, Result{VerdictRelease, 503, "not_sent", false}},
		{"timeout after sending", 0, timeout, nil, Result{VerdictUnknown, 504, "upstream_error", true}},
		{"aborted body", 200, nil, http.ErrAbortHandler, Result{VerdictUnknown, 200, "response_aborted", true}},
		{"error after the status", 200, caddyhttp.Error(502, errors.New("reading body: unexpected EOF")), nil, Result{VerdictUnknown, 502, "upstream_error", true}},
		{"panic before the status", 0, nil, http.ErrAbortHandler, Result{VerdictUnknown, 0, "response_aborted", true}},
	}
	short := &Capture{status: 200, declared: 1000, size: 500}
	if got, want := classify(rt, short, nil, nil), (Result{VerdictUnknown, 200, "response_cut_off", true}); got != want {
		t.Errorf("a body shorter than its Content-Length: classify = %+v, want %+v", got, want)
	}
	stored := Rules{OnRedirect: config.OnRedirectStore}
	for _, code := range []int{307, 308} {
		if got, want := classify(stored, &Capture{status: code, declared: -1}, nil, nil), (Result{VerdictComplete, code, "", false}); got != want {
			t.Errorf("%d under on_redirect: store: classify = %+v, want %+v", code, got, want)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cw := &Capture{status: tc.status, declared: -1}
			if got := classify(rt, cw, tc.err, tc.panicked); got != tc.want {
				t.Errorf("classify = %+v, want %+v", got, tc.want)
			}
		})
	}
}

type failingWriter struct {
	*httptest.ResponseRecorder
	writes int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	f.writes++
	if f.writes > 1 {
		return 0, errors.New("client gone")
	}
	return f.ResponseRecorder.Write(p)
}

func TestCapture(t *testing.T) {
	t.Parallel()
	t.Run("within the limit", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := NewCapture(rec, 10)
		c.Header().Set("Content-Type", "text/plain")
		c.WriteHeader(201)
		_, _ = c.Write([]byte("hello"))
		_ = c.FlushError()
		_, _ = c.Write([]byte("world"))
		if c.overflow || string(c.body()) != "helloworld" || c.status != 201 {
			t.Errorf("overflow=%v body=%q status=%d", c.overflow, c.body(), c.status)
		}
		// Held back until the result is recorded: the client has nothing yet.
		if rec.Body.Len() != 0 || rec.Flushed || c.passing {
			t.Errorf("before deliver the client got %q (flushed %v)", rec.Body, rec.Flushed)
		}
		c.Deliver()
		if rec.Code != 201 || rec.Body.String() != "helloworld" || rec.Header().Get("Content-Type") != "text/plain" {
			t.Errorf("delivered %d %q", rec.Code, rec.Body)
		}
	})
	t.Run("trailers stay trailers when a held answer is delivered", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := NewCapture(rec, 100)
		c.Header().Set("Trailer", "X-Checksum")
		c.WriteHeader(200)
		_, _ = c.Write([]byte("body"))
		c.Header().Set("X-Checksum", "abc") // reverse_proxy copies trailers after the body
		c.Deliver()
		res := rec.Result()
		if res.Header.Get("X-Checksum") != "" || res.Trailer.Get("X-Checksum") != "abc" {
			t.Errorf("header %q, trailer %q; want the value as a trailer only", res.Header.Get("X-Checksum"), res.Trailer.Get("X-Checksum"))
		}
	})
	t.Run("growing past the limit sends what was held, then streams", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := NewCapture(rec, 8)
		c.WriteHeader(200)
		_, _ = c.Write([]byte("12345"))
		if rec.Body.Len() != 0 {
			t.Fatalf("within the limit the client got %q", rec.Body)
		}
		_, _ = c.Write([]byte("6789"))
		if !c.overflow || !c.passing || rec.Body.String() != "123456789" {
			t.Fatalf("past the limit: overflow=%v passing=%v client %q", c.overflow, c.passing, rec.Body)
		}
		c.Deliver() // nothing more to send
		if rec.Body.String() != "123456789" {
			t.Errorf("deliver after streaming sent more: %q", rec.Body)
		}
	})
	t.Run("over the limit streams and keeps the digest", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := NewCapture(rec, 8)
		data := bytes.Repeat([]byte("0123456789"), 5)
		for i := 0; i < len(data); i += 7 {
			_, _ = c.Write(data[i:min(i+7, len(data))])
		}
		full := NewCapture(httptest.NewRecorder(), 1<<20)
		_, _ = full.Write(data)
		if !c.overflow || c.body() != nil || !bytes.Equal(rec.Body.Bytes(), data) || !bytes.Equal(c.sum(), full.sum()) {
			t.Errorf("overflow=%v body=%q client=%d bytes", c.overflow, c.body(), rec.Body.Len())
		}
	})
	t.Run("a client that went away does not stop the capture", func(t *testing.T) {
		fw := &failingWriter{ResponseRecorder: httptest.NewRecorder()}
		c := NewCapture(fw, 100)
		for _, part := range []string{"a", "b", "c"} {
			if n, err := c.Write([]byte(part)); n != 1 || err != nil {
				t.Fatalf("Write = %d, %v; the upstream copy must go on", n, err)
			}
		}
		fw.writes = 1 // gone by the time the recorded answer is delivered
		c.Deliver()
		if string(c.body()) != "abc" || c.clientErr == nil {
			t.Errorf("body=%q clientErr=%v", c.body(), c.clientErr)
		}
		// Streaming past the limit, the same.
		fw = &failingWriter{ResponseRecorder: httptest.NewRecorder()}
		c = NewCapture(fw, 1)
		for _, part := range []string{"a", "b", "c"} {
			if n, err := c.Write([]byte(part)); n != 1 || err != nil {
				t.Fatalf("Write = %d, %v; the upstream copy must go on", n, err)
			}
		}
		if !c.overflow || c.size != 3 || c.clientErr == nil {
			t.Errorf("streaming: overflow=%v size=%d clientErr=%v", c.overflow, c.size, c.clientErr)
		}
	})
	t.Run("event streams are not replayable", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := NewCapture(rec, 100)
		c.Header().Set("Content-Type", "text/event-stream")
		c.WriteHeader(200)
		_, _ = c.Write([]byte("data: 1\n\n"))
		_ = c.FlushError()
		if !c.streaming || !c.passing || rec.Body.String() != "data: 1\n\n" || !rec.Flushed {
			t.Errorf("event stream: streaming=%v passing=%v client %q flushed=%v; want it passed through at once", c.streaming, c.passing, rec.Body, rec.Flushed)
		}
	})
}

// TestCaptureReadFrom: a body copied in with io.Copy (ReadFrom) reaches the
// client and is captured and digested like one written with Write.
func TestCaptureReadFrom(t *testing.T) {
	rec := httptest.NewRecorder()
	cw := NewCapture(rec, 1<<10)
	defer cw.Release()
	if _, err := io.Copy(cw, strings.NewReader("hello, world")); err != nil {
		t.Fatal(err)
	}
	cw.Deliver()
	if got := string(cw.body()); got != "hello, world" || rec.Body.String() != "hello, world" || cw.size != 12 {
		t.Fatalf("captured %q, client got %q, size %d", got, rec.Body.String(), cw.size)
	}
	if http.NewResponseController(cw).Flush() != nil || !rec.Flushed {
		t.Error("flush did not reach the client's writer")
	}
}
