package redis

import (
	"path/filepath"
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/idemgate/idemgate/internal/caddyopt"
)

// UnmarshalCaddyfile sets up the Redis store from the idempotency
// handler's `store` option and the store options beside it:
//
//	store        <redis-url> [<redis-url>...]
//	master_name  <name>                 # Sentinel: the addresses are sentinels
//	cluster                             # Cluster: the addresses are seeds
//	username     <user>
//	password     <password>
//	db           <n>
//	tls
//	tls_server_name <name>
//	tls_ca_file  <file>                 # PEM roots for Redis's certificate
//	key_prefix   <prefix>
//	pool_size    <n>
//	dial_timeout <duration>
//	op_timeout   <duration>
//	wait_replicas <n> [strict]          # WAIT for n replicas after claims and completions
//	wait_timeout <duration>             # bound on each WAIT (default 100ms)
//	allow_eviction                      # accept a Redis whose maxmemory-policy may evict records
//
// The options may also be written in a block after the addresses. A
// relative tls_ca_file is taken from the Caddyfile's directory.
func (m *Module) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the option name
	m.Addresses = d.RemainingArgs()
	if len(m.Addresses) > 1 && m.Addresses[0] == "redis" {
		m.Addresses = m.Addresses[1:] // store redis <address>...: the engine named
	}
	if len(m.Addresses) == 0 {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch opt := d.Val(); opt {
		case "master_name":
			if !d.AllArgs(&m.MasterName) {
				return d.ArgErr()
			}
		case "cluster", "tls", "allow_eviction":
			if d.NextArg() {
				return d.ArgErr()
			}
			switch opt {
			case "cluster":
				m.Cluster = true
			case "tls":
				m.TLS = true
			default:
				m.AllowEviction = true
			}
		case "username":
			if !d.AllArgs(&m.Username) {
				return d.ArgErr()
			}
		case "password":
			if !d.AllArgs(&m.Password) {
				return d.ArgErr()
			}
		case "tls_server_name":
			if !d.AllArgs(&m.TLSServerName) {
				return d.ArgErr()
			}
		case "tls_ca_file":
			if !d.AllArgs(&m.TLSCAFile) {
				return d.ArgErr()
			}
			if !filepath.IsAbs(m.TLSCAFile) && d.File() != "" {
				m.TLSCAFile = filepath.Join(filepath.Dir(d.File()), m.TLSCAFile)
			}
		case "key_prefix":
			if !d.AllArgs(&m.KeyPrefix) {
				return d.ArgErr()
			}
		case "wait_replicas":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 0 {
				return d.Errf("%s: %q is not a non-negative number", opt, args[0])
			}
			m.WaitReplicas = n
			if len(args) == 2 {
				if args[1] != "strict" {
					return d.Errf("%s: %q is not strict", opt, args[1])
				}
				if n == 0 {
					return d.Errf("%s: strict needs at least one replica", opt)
				}
				m.WaitStrict = true
			}
		case "db", "pool_size":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return d.Errf("%s: %q is not a non-negative number", opt, s)
			}
			if opt == "db" {
				m.DB = n
			} else {
				m.PoolSize = n
			}
		case "dial_timeout", "op_timeout", "wait_timeout":
			dur, err := caddyopt.Duration(d)
			if err != nil {
				return err
			}
			switch opt {
			case "dial_timeout":
				m.DialTimeout = dur
			case "op_timeout":
				m.OpTimeout = dur
			default:
				m.WaitTimeout = dur
			}
		case "cache_size":
			return d.Err("cache_size is the embedded store's; Redis keeps its records in its own memory")
		case "sync_interval":
			return d.Err("sync_interval is the embedded store's; Redis syncs as its appendfsync setting says")
		default:
			return d.Errf("unrecognized option '%s' of the Redis store", opt)
		}
	}
	return nil
}
