package redrive

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// mark is a handler that notes its name on the request and goes on.
type mark string

func (m mark) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	r.Header.Add("X-Ran", string(m))
	return next.ServeHTTP(w, r)
}

// respond is a provisioned route that answers status with body, as Caddy
// compiles routes from their config.
func respond(t *testing.T, ctx caddy.Context, status int, body string) caddyhttp.Route {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"handler": "static_response", "status_code": status, "body": body})
	if err != nil {
		t.Fatal(err)
	}
	rt := caddyhttp.Route{HandlersRaw: []json.RawMessage{raw}}
	if err := rt.ProvisionHandlers(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestAfterFindsTheChain: the chain a re-drive goes through is what runs
// after the handler in its config: the rest of its route's handlers, then
// the routes after it (none past a terminal route), looking into
// subroutes; the handlers before it never run.
func TestAfterFindsTheChain(t *testing.T) {
	t.Parallel()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	h := new(mark) // the idempotency handler's place
	sub := func(routes ...caddyhttp.Route) caddyhttp.MiddlewareHandler {
		return &caddyhttp.Subroute{Routes: routes}
	}
	for _, tc := range []struct {
		name   string
		routes caddyhttp.RouteList
		ran    string // the marks the re-drive passed, in order
		status int    // 0: nothing answered (the request is unhandled)
		body   string
	}{
		{
			name: "in a site's subroute, before reverse_proxy",
			routes: caddyhttp.RouteList{{
				Handlers: []caddyhttp.MiddlewareHandler{mark("before"), sub(
					caddyhttp.Route{Handlers: []caddyhttp.MiddlewareHandler{mark("auth")}},
					caddyhttp.Route{Handlers: []caddyhttp.MiddlewareHandler{h, mark("same-route")}},
					respond(t, ctx, 201, "proxied"),
				)},
				Terminal: true,
			}, respond(t, ctx, 404, "next site")},
			ran: "same-route", status: 201, body: "proxied",
		},
		{
			name: "last in a terminal route",
			routes: caddyhttp.RouteList{
				{Handlers: []caddyhttp.MiddlewareHandler{sub(caddyhttp.Route{Handlers: []caddyhttp.MiddlewareHandler{h}}), mark("after-sub")}, Terminal: true},
				respond(t, ctx, 404, "never"),
			},
			ran: "after-sub", status: 0,
		},
		{
			name: "last in a route that is not terminal",
			routes: caddyhttp.RouteList{
				{Handlers: []caddyhttp.MiddlewareHandler{mark("before"), h}},
				respond(t, ctx, 202, "next route"),
			},
			status: 202, body: "next route",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := after(h, tc.routes, unhandled)
			if next == nil {
				t.Fatal("the handler was not found")
			}
			w := httptest.NewRecorder()
			r := caddyhttp.PrepareRequest(httptest.NewRequest("POST", "/deals", nil), caddy.NewReplacer(), w, &caddyhttp.Server{})
			if err := next.ServeHTTP(w, r); err != nil {
				t.Fatal(err)
			}
			ran := strings.Join(r.Header.Values("X-Ran"), ",")
			status := w.Code
			if !w.Flushed && w.Body.Len() == 0 && w.Code == http.StatusOK {
				status = 0 // nothing written
			}
			if ran != tc.ran || status != tc.status || w.Body.String() != tc.body {
				t.Fatalf("ran %q, answered %d %q; want %q, %d %q", ran, status, w.Body.String(), tc.ran, tc.status, tc.body)
			}
		})
	}
	if after(h, caddyhttp.RouteList{{Handlers: []caddyhttp.MiddlewareHandler{mark("other")}}}, unhandled) != nil {
		t.Fatal("found a handler that is not in the routes")
	}
}
