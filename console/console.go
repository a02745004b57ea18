// Package console is the operator console of Idemgate: the HTTP handler
// http.handlers.idempotency_console (Caddyfile directive
// idempotency_console), a few server-rendered pages for the people who
// resolve held operations.
//
// It is mounted where the operator puts it, behind Caddy's own
// authentication:
//
//	handle_path /ops/* {
//	    basic_auth {
//	        alice $2a$14$...
//	    }
//	    idempotency_console
//	}
//
// It sees the record stores of every idempotency handler in the running
// config (storepool.LiveStores, as the admin API does) and offers:
//
//   - the queue (GET /): records by state, held ones first and oldest first,
//     filtered by state and route, paginated from the stores' state indexes,
//     with a per-route summary;
//   - a record (GET /records/{id}): its timeline, the stored response with
//     credentials redacted, and the actions;
//   - the actions (POST /records/{id}/release, /records/{id}/complete,
//     /records/{id}/verify): each needs a signed-in operator (the actor,
//     {http.auth.user.id} by default; without one, 403 unless
//     allow_anonymous) and a reason, goes through the store's fenced
//     operator call, is kept on the record as an audit entry and is
//     logged.
//
// Pages are plain HTML (html/template, embedded CSS, no JavaScript). Every
// response is Cache-Control: no-store. POSTs must be same-origin (checked
// by Sec-Fetch-Site and Origin) and carry the form's csrf_token. Nothing of
// a request (keys, bodies, Authorization, scope) is shown: records do not
// hold it.
package console

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/storepool"
)

func init() {
	caddy.RegisterModule(Console{})
}

// defaultActor is the placeholder that names who acted: the user that
// Caddy's authentication handler (basic_auth, or another
// http.handlers.authentication provider) signed in.
const defaultActor = "{http.auth.user.id}"

// anonymous is the actor recorded when the actor placeholder resolves to
// nothing (the console is not behind authentication) and the console
// sets allow_anonymous.
const anonymous = "anonymous"

// Console is the operator console handler (module
// http.handlers.idempotency_console). It answers every request itself and
// never calls the next handler.
type Console struct {
	// Actor names who takes an action, for the audit trail and the log: a
	// placeholder template resolved for each request. Default
	// "{http.auth.user.id}", the user that basic_auth signed in. Behind
	// forward_auth, name the header it copies, for example
	// "{http.request.header.Remote-User}". When it resolves to nothing,
	// nobody is signed in: every page says so and actions are refused
	// (403) unless AllowAnonymous is set.
	Actor string `json:"actor,omitempty"`

	// CSRFSecret keys the forms' csrf_token. Default: a random key made
	// once per process, so a page loaded before a restart must be
	// reloaded before its form is accepted. Set the same value (for
	// example "{env.IDEMGATE_CONSOLE_SECRET}", at least 16 bytes) on every
	// gateway when a load balancer may send one operator's requests to
	// different gateways.
	CSRFSecret string `json:"csrf_secret,omitempty"`

	// AllowAnonymous lets actions through when the actor resolves to
	// nobody (recorded as "anonymous"), for a console reachable only from
	// a trusted network. Default false: without a signed-in operator,
	// pages show but every action is refused with 403 and a page that says
	// why.
	AllowAnonymous bool `json:"allow_anonymous,omitempty"`

	key    []byte
	logger *zap.Logger
	stores func() []operator.LiveStore
	origin *http.CrossOriginProtection
}

// CaddyModule returns the Caddy module information.
func (Console) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency_console",
		New: func() caddy.Module { return new(Console) },
	}
}

// processKey is the default CSRF key: random, made once per process so
// that a config reload does not invalidate open forms.
var processKey = sync.OnceValue(func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand panics instead)
	return k
})

// minSecret is the shortest CSRFSecret accepted.
const minSecret = 16

// Provision sets up the logger, the CSRF key and the store source.
func (c *Console) Provision(ctx caddy.Context) error {
	c.logger = ctx.Logger()
	if c.Actor == "" {
		c.Actor = defaultActor
	}
	if c.CSRFSecret != "" {
		secret := caddy.NewReplacer().ReplaceKnown(c.CSRFSecret, "")
		if len(secret) < minSecret {
			return fmt.Errorf("idempotency_console: csrf_secret is shorter than %d bytes (after placeholders)", minSecret)
		}
		c.key = []byte(secret)
	} else {
		c.key = processKey()
	}
	if c.stores == nil {
		c.stores = storepool.LiveStores
	}
	c.origin = http.NewCrossOriginProtection()
	return nil
}

// Validate checks the configuration.
func (c *Console) Validate() error {
	if strings.TrimSpace(c.Actor) == "" {
		return errors.New("idempotency_console: actor is empty")
	}
	return nil
}

// ServeHTTP answers a console request. The path is what is left after the
// mount point (handle_path strips it): "/", "/records/{id}",
// "/records/{id}/{release|complete|verify}", "/static/console.css".
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	setSecurityHeaders(w.Header())
	p := newPageContext(c, r)

	path := r.URL.Path
	if path == "" {
		// Mounted as "/ops*" and asked for "/ops": relative links need
		// the trailing slash.
		return redirectWithSlash(w, r)
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	switch {
	case path == "/":
		if !allowMethod(w, r, p, http.MethodGet) {
			return nil
		}
		c.serveQueue(w, r, p)
	case path == "/static/console.css":
		if !allowMethod(w, r, p, http.MethodGet) {
			return nil
		}
		serveCSS(w, r)
	case len(parts) == 2 && parts[0] == "records":
		if !allowMethod(w, r, p, http.MethodGet) {
			return nil
		}
		c.serveRecord(w, r, p, parts[1])
	case len(parts) == 3 && parts[0] == "records" && (parts[2] == actionRelease || parts[2] == actionComplete || parts[2] == actionVerify || parts[2] == actionRun):
		if !allowMethod(w, r, p, http.MethodPost) {
			return nil
		}
		c.serveAction(w, r, p, parts[1], parts[2])
	default:
		p.renderError(w, http.StatusNotFound, "Not found", "There is no console page at this address.")
	}
	return nil
}

// setSecurityHeaders sets what every console response carries: nothing is
// cached or framed, no script or remote resource is loaded, forms post
// only to the console itself, and record ids never leak in a Referer.
func setSecurityHeaders(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy",
		"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
}

// allowMethod answers 405 unless r uses method (or HEAD for GET).
func allowMethod(w http.ResponseWriter, r *http.Request, p *pageContext, method string) bool {
	if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	w.Header().Set("Allow", method)
	p.renderError(w, http.StatusMethodNotAllowed, "Method not allowed", "This page answers "+method+" only.")
	return false
}

// redirectWithSlash sends the browser to the mount point with a trailing
// slash.
func redirectWithSlash(w http.ResponseWriter, r *http.Request) error {
	target := "./"
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		target = orig.URL.EscapedPath() + "/"
		if !strings.HasPrefix(target, "/") || strings.HasPrefix(target, "//") {
			target = "./"
		}
	}
	// Not http.Redirect: it would resolve a relative target against the
	// stripped path.
	w.Header().Set("Location", target)
	w.WriteHeader(http.StatusMovedPermanently)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Console)(nil)
	_ caddy.Validator             = (*Console)(nil)
	_ caddyhttp.MiddlewareHandler = (*Console)(nil)
)
