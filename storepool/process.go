package storepool

import "github.com/idemgate/idemgate/operator"

// process is the pool of the record stores the process has open.
// Process-wide by nature, as reverse_proxy's upstream pool is: a store
// outlives a config reload (its engine is shared by the old and the new
// config, which Caddy provisions side by side), and the operator API and
// the operator console, modules provisioned apart from any handler, list
// the stores of every loaded config. Only a pool outside any one config
// can do both.
var process = New()

// Default returns the process's pool: the one every idempotency handler
// opens its record store in.
func Default() *Pool { return process }

// LiveStores returns the record stores of every idempotency handler in
// the running config, in a stable order, for the operator service
// (package operator) behind the admin API and the operator console.
func LiveStores() []operator.LiveStore { return process.Live() }
