package caddymodule

import (
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

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
// used instead (Handler.remember).

// redriveTo is the HTTP app of the handler's config, and the chain after
// the handler there once found.
type redriveTo struct {
	app   *caddyhttp.App // nil: a handler provisioned outside a config
	chain atomic.Pointer[chain]
}

// newRedriveTo keeps the HTTP app of the config being provisioned.
func newRedriveTo(ctx caddy.Context) *redriveTo {
	to := &redriveTo{}
	if app, err := ctx.AppIfConfigured("http"); err == nil {
		to.app, _ = app.(*caddyhttp.App)
	}
	return to
}

// redriveChain is the chain a re-drive of rt goes through: the one found
// in the config (kept once found), else the one rt's requests brought
// (nil: neither).
func (h *Handler) redriveChain(rt *route) *chain {
	to := h.redriveTo
	if to == nil {
		return h.runtime(rt).chain.Load()
	}
	if ch := to.chain.Load(); ch != nil {
		return ch
	}
	if to.app != nil {
		for _, srv := range to.app.Servers {
			if next := after(h, srv.Routes, unhandled); next != nil {
				ch := &chain{next: next, server: srv}
				to.chain.Store(ch)
				return ch
			}
		}
	}
	return h.runtime(rt).chain.Load()
}

// unhandled ends a server's chain, as Caddy's own end does: nothing
// handled the request.
var unhandled caddyhttp.Handler = caddyhttp.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) error {
	caddyhttp.SetVar(r.Context(), "unhandled", true)
	return nil
})

// after is what runs after h when routes run with next after them, as
// RouteList.Compile chains them; nil when h is not in routes or their
// subroutes.
func after(h *Handler, routes caddyhttp.RouteList, next caddyhttp.Handler) caddyhttp.Handler {
	for i, rt := range routes {
		tail := unhandled // a terminal route ends the chain
		if !rt.Terminal {
			tail = routes[i+1:].Compile(next)
		}
		for j, mh := range rt.Handlers {
			if mh == caddyhttp.MiddlewareHandler(h) {
				return chained(rt.Handlers[j+1:], tail)
			}
			if sr, ok := mh.(*caddyhttp.Subroute); ok {
				if found := after(h, sr.Routes, chained(rt.Handlers[j+1:], tail)); found != nil {
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
