// Package redrive is where and what an operator's re-drive sends: the
// rest of the handler chain after the idempotency handler, found in the
// config it was provisioned in, and the kept request rebuilt for it.
//
// Where a re-drive goes: the rest of the handler chain after this
// handler, as a client's request meets it. Caddy only hands that chain to
// ServeHTTP, so the handler finds it in the config it was provisioned in:
// it looks itself up in the HTTP servers' routes, into subroutes (handle,
// handle_path, route), and builds what runs after it there the way Caddy
// compiles routes (the rest of its route's handlers, then the routes after
// it, unless its route is terminal). That works right after a start or a
// reload, before any request reached the route. Where the handler sits
// somewhere this lookup does not reach (handle_errors, a named route, a
// reverse_proxy response handler), the chain a guarded request brought is
// used instead (the handler's remember).
package redrive

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/sealed"
)

// Chain is the rest of a route's handler chain and its server.
type Chain struct {
	Next   caddyhttp.Handler
	Server *caddyhttp.Server
}

// To is the HTTP app of a handler's config, and the chain after the
// handler there once found.
type To struct {
	app   *caddyhttp.App // nil: a handler provisioned outside a config
	chain atomic.Pointer[Chain]
}

// NewTo keeps the HTTP app of the config being provisioned.
func NewTo(ctx caddy.Context) *To {
	to := &To{}
	if app, err := ctx.AppIfConfigured("http"); err == nil {
		to.app, _ = app.(*caddyhttp.App)
	}
	return to
}

// Find is the chain after self in the config's servers (kept once
// found); nil when self is not found there.
func (to *To) Find(self caddyhttp.MiddlewareHandler) *Chain {
	if ch := to.chain.Load(); ch != nil {
		return ch
	}
	if to.app == nil {
		return nil
	}
	for _, srv := range to.app.Servers {
		if next := after(self, srv.Routes, unhandled); next != nil {
			ch := &Chain{Next: next, Server: srv}
			to.chain.Store(ch)
			return ch
		}
	}
	return nil
}

// unhandled ends a server's chain, as Caddy's own end does: nothing
// handled the request.
var unhandled caddyhttp.Handler = caddyhttp.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) error {
	caddyhttp.SetVar(r.Context(), "unhandled", true)
	return nil
})

// after is what runs after self when routes run with next after them, as
// RouteList.Compile chains them; nil when self is not in routes or their
// subroutes.
func after(self caddyhttp.MiddlewareHandler, routes caddyhttp.RouteList, next caddyhttp.Handler) caddyhttp.Handler {
	for i, rt := range routes {
		tail := unhandled // a terminal route ends the chain
		if !rt.Terminal {
			tail = routes[i+1:].Compile(next)
		}
		for j, mh := range rt.Handlers {
			if mh == self {
				return chained(rt.Handlers[j+1:], tail)
			}
			if sr, ok := mh.(*caddyhttp.Subroute); ok {
				if found := after(self, sr.Routes, chained(rt.Handlers[j+1:], tail)); found != nil {
					return found
				}
			}
		}
	}
	return nil
}

// chained runs handlers in order, then next.
func chained(handlers []caddyhttp.MiddlewareHandler, next caddyhttp.Handler) caddyhttp.Handler {
	for _, mh := range slices.Backward(handlers) {
		n := next
		next = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return mh.ServeHTTP(w, r, n) })
	}
	return next
}

// Request is the kept request kr rebuilt for its re-drive through server,
// with header set over its kept headers (redrive_headers), and where its
// answer goes once recorded: nobody waits for it but the operator, who
// gets the record.
func Request(kr *sealed.Request, header http.Header, server *caddyhttp.Server) (*http.Request, http.ResponseWriter, error) {
	target, err := url.ParseRequestURI(kr.Target)
	if err != nil {
		return nil, nil, err
	}
	r := &http.Request{
		Method: kr.Method, URL: target, RequestURI: kr.Target, Host: kr.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: kr.Header.Clone(), Body: http.NoBody, RemoteAddr: "127.0.0.1:0",
	}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if len(kr.Body) > 0 {
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(kr.Body)), int64(len(kr.Body))
	}
	for name, vv := range header {
		r.Header[name] = vv
	}
	sink := &discard{h: http.Header{}}
	return caddyhttp.PrepareRequest(r.WithContext(context.Background()), caddy.NewReplacer(), sink, server), sink, nil
}

// discard is where a re-drive's response goes once recorded.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}
