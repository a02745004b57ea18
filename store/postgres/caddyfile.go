package postgres

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemgate/idemgate/internal/caddyopt"
)

// IsURL reports whether a `store` argument is a Postgres connection URL.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// UnmarshalCaddyfile sets up the Postgres store from the idempotency
// handler's `store` option and the store options beside it:
//
//	store        postgres://user:pass@host:5432/db?sslmode=verify-full
//	schema       <name>                 # default idemgate
//	pool_size    <n>
//	op_timeout   <duration>
//	tls_ca_file  <file>                 # PEM roots for the server's certificate
//	listen_url   <url>                  # the notices' LISTEN connection, behind a pooler in transaction mode
//
// `store postgres <url>` names the engine too. A relative tls_ca_file is
// taken from the Caddyfile's directory. The other engines' options are
// refused with the reason.
func (m *Module) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the option name
	args := d.RemainingArgs()
	if len(args) > 0 && args[0] == "postgres" {
		args = args[1:]
	}
	if len(args) != 1 {
		return d.Errf("store postgres takes one connection URL, got %d arguments", len(args))
	}
	m.URL = args[0]
	for d.NextBlock(0) {
		switch opt := d.Val(); opt {
		case "schema":
			if !d.AllArgs(&m.Schema) {
				return d.ArgErr()
			}
			if err := checkSchema(m.Schema); err != nil {
				return d.WrapErr(err)
			}
		case "listen_url":
			if !d.AllArgs(&m.ListenURL) {
				return d.ArgErr()
			}
		case "pool_size":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return d.Errf("pool_size: %q is not a positive number", s)
			}
			m.PoolSize = n
		case "op_timeout":
			dur, err := caddyopt.Duration(d)
			if err != nil {
				return err
			}
			m.OpTimeout = dur
		case "tls_ca_file":
			if !d.AllArgs(&m.TLSCAFile) {
				return d.ArgErr()
			}
			if !filepath.IsAbs(m.TLSCAFile) && d.File() != "" {
				m.TLSCAFile = filepath.Join(filepath.Dir(d.File()), m.TLSCAFile)
			}
		case "wait_replicas", "wait_timeout":
			return d.Errf("%s is for Redis; on Postgres a claim waits for the synchronous standbys the server's synchronous_standby_names names", opt)
		case "cache_size":
			return d.Err("cache_size is the embedded store's; Postgres keeps its own cache (shared_buffers)")
		case "master_name", "cluster", "username", "password", "db", "tls", "tls_server_name",
			"key_prefix", "dial_timeout", "allow_eviction":
			return d.Errf("%s is an option of the Redis store; on Postgres it goes in the URL or is not needed", opt)
		default:
			return d.Errf("unrecognized option '%s' of the Postgres store", opt)
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Module)(nil)
