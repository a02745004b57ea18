// Package idemgate registers the Idemgate Caddy modules. Import it (or
// build with `xcaddy build --with github.com/idemgate/idemgate`) to add
// the http.handlers.idempotency handler, the operator API on the admin
// endpoint (admin.api.idempotency), the operator console
// http.handlers.idempotency_console and their Caddyfile directives to a
// Caddy binary.
package idemgate

import (
	// The handler and its Caddyfile directive, the operator API and the
	// operator console register themselves when imported.
	_ "github.com/idemgate/idemgate/adminapi"
	_ "github.com/idemgate/idemgate/caddymodule"
	_ "github.com/idemgate/idemgate/console"
)
