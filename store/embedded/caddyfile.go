package embedded

import (
	"path/filepath"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"
	"github.com/idemgate/idemgate/internal/caddyopt"
)

// UnmarshalCaddyfile sets up the embedded store from the idempotency
// handler's `store` option and the store options beside it:
//
//	store        embedded [<dir>]
//	cache_size   <size>                 # block cache, e.g. 64MiB (default 16MiB)
//	op_timeout   <duration>
//	sync_interval <duration>             # the longest a result waits for its fsync (default 100ms)
//
// A relative directory is taken from the Caddyfile's directory. The Redis
// store's options are refused with the reason.
func (m *Module) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the option name
	args := d.RemainingArgs()
	if len(args) > 0 && args[0] == "embedded" {
		args = args[1:]
	}
	switch len(args) {
	case 0:
	case 1:
		m.Dir = args[0]
		if !filepath.IsAbs(m.Dir) && d.File() != "" {
			m.Dir = filepath.Join(filepath.Dir(d.File()), m.Dir)
		}
	default:
		return d.Errf("store embedded takes one directory, got %d arguments", len(args))
	}
	for d.NextBlock(0) {
		switch opt := d.Val(); opt {
		case "cache_size":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			n, err := humanize.ParseBytes(v)
			if err != nil || n == 0 || n > 1<<40 {
				return d.Errf("cache_size: %q is not a size such as 64MiB", v)
			}
			m.CacheSize = int64(n)
		case "op_timeout":
			dur, err := caddyopt.Duration(d)
			if err != nil {
				return err
			}
			m.OpTimeout = dur
		case "sync_interval":
			dur, err := caddyopt.Duration(d)
			if err != nil {
				return err
			}
			m.SyncInterval = dur
		case "wait_replicas", "wait_timeout":
			return d.Errf("%s needs a Redis with replicas; the embedded store has none", opt)
		case "allow_eviction":
			return d.Err("allow_eviction is for Redis; the embedded store evicts nothing")
		case "master_name", "cluster", "username", "password", "db", "tls", "tls_server_name", "tls_ca_file",
			"key_prefix", "pool_size", "dial_timeout":
			return d.Errf("%s is an option of the Redis store; the embedded store has none (store redis://…)", opt)
		default:
			return d.Errf("unrecognized option '%s' of the embedded store", opt)
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Module)(nil)
