// Package handlertest holds what the tests of packages that drive the
// idempotency handler in process share: a Caddy data directory of their
// own, and one request through a handler.
package handlertest

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Main runs m with a Caddy data directory of its own: a handler on the
// embedded store without a directory opens Caddy's data directory +
// /idemgate, which one process owns, and must never be the machine's real
// one (a running gateway's, or another test binary's).
func Main(m *testing.M, name string) {
	dir, err := os.MkdirTemp("", name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_DATA_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Serve runs one request through h with next as the rest of the chain;
// headers are name, value pairs. A handler error becomes its status.
func Serve(h caddyhttp.MiddlewareHandler, next caddyhttp.Handler, method, path, body string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), w, &caddyhttp.Server{})
	if err := h.ServeHTTP(w, req, next); err != nil {
		w.Code = http.StatusInternalServerError
		var he caddyhttp.HandlerError
		if errors.As(err, &he) {
			w.Code = he.StatusCode
		}
	}
	return w
}
