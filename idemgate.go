// Package idemgate registers the Idemgate Caddy modules. Import it (or
// build with `xcaddy build --with github.com/idemgate/idemgate`) to add
// the http.handlers.idempotency handler and its Caddyfile directive to a
// Caddy binary.
package idemgate

import (
	// The handler, its Caddyfile directive and admin API register
	// themselves when imported.
	_ "github.com/idemgate/idemgate/caddymodule"
)
