package console

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("idempotency_console", parseCaddyfile)
	// With the handlers that answer requests themselves, after the
	// authentication directives, so it works inside handle_path behind
	// basic_auth without a global `order`.
	httpcaddyfile.RegisterDirectiveOrder("idempotency_console", httpcaddyfile.After, "metrics")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	c := new(Console)
	err := c.UnmarshalCaddyfile(h.Dispenser)
	return c, err
}

// UnmarshalCaddyfile sets up the console from Caddyfile tokens:
//
//	idempotency_console {
//	    actor       <placeholder>   # who acts; default {http.auth.user.id}
//	    csrf_secret <secret>        # form-token key shared by several gateways; default: random per process
//	    allow_anonymous             # let actions through when actor names nobody (trusted networks only)
//	}
//
// Every option is optional; a bare `idempotency_console` behind
// basic_auth is the usual form.
func (c *Console) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch opt := d.Val(); opt {
		case "actor":
			if !d.AllArgs(&c.Actor) {
				return d.ArgErr()
			}
		case "csrf_secret":
			if !d.AllArgs(&c.CSRFSecret) {
				return d.ArgErr()
			}
		case "allow_anonymous":
			if d.NextArg() {
				return d.ArgErr()
			}
			c.AllowAnonymous = true
		default:
			return d.Errf("unrecognized idempotency_console option '%s'", opt)
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Console)(nil)
