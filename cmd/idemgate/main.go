// Command idemgate is Caddy with its standard modules and the Idemgate
// idempotency handler. It takes Caddy's usual subcommands:
//
//	idemgate run --config Caddyfile
//	idemgate reload --config Caddyfile
//	idemgate list-modules
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/idemgate/idemgate"
)

func main() {
	caddycmd.Main()
}
