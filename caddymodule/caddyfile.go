package caddymodule

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("idempotency", parseCaddyfile)
	// After encode (so replays are stored uncompressed) and the
	// authentication directives before it (so unauthenticated requests
	// never reach the store); before handle, route and reverse_proxy.
	httpcaddyfile.RegisterDirectiveOrder("idempotency", httpcaddyfile.After, "encode")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	err := handler.UnmarshalCaddyfile(h.Dispenser)
	return handler, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	idempotency {
//	    rules        <file>                 # YAML route rules, inlined while adapting
//	    store        embedded [<dir>] | <redis-url> [<redis-url>...]
//	    master_name  <name>                 # Sentinel: the addresses are sentinels
//	    cluster                             # Cluster: the addresses are seeds
//	    username     <user>
//	    password     <password>
//	    db           <n>
//	    tls
//	    tls_server_name <name>
//	    tls_ca_file  <file>                 # PEM roots for Redis's certificate
//	    secret       <secret>               # record ids are keyed with it (default: kept in the store)
//	    key_prefix   <prefix>
//	    pool_size    <n>
//	    dial_timeout <duration>
//	    op_timeout   <duration>
//	    wait_replicas <n> [strict]          # WAIT for n replicas after claims and completions; strict: refuse a claim they did not all acknowledge
//	    wait_timeout <duration>             # bound on each WAIT (default 100ms)
//	    allow_eviction                      # accept a Redis whose maxmemory-policy may evict records
//	}
//
// The rules file is read while the Caddyfile is adapted and its rules are
// inlined into the JSON config, so editing it and running `caddy reload`
// applies the change; a file that fails validation fails the reload with
// its file, line and field, and the running config keeps serving. A
// relative path (rules, the embedded store's directory, tls_ca_file) is
// taken from the Caddyfile's directory. The embedded store's directory
// defaults to Caddy's data directory + /idemgate.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	var rulesFile string
	for d.NextBlock(0) {
		switch opt := d.Val(); opt {
		case "rules":
			if !d.AllArgs(&rulesFile) {
				return d.ArgErr()
			}
			if !filepath.IsAbs(rulesFile) && d.File() != "" {
				rulesFile = filepath.Join(filepath.Dir(d.File()), rulesFile)
			}
		case "store":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			if args[0] == "embedded" {
				if len(args) > 2 {
					return d.Errf("store embedded takes one directory, got %d arguments", len(args)-1)
				}
				h.Store.Addresses, h.Store.Dir = nil, ""
				if len(args) == 2 {
					dir := args[1]
					if !filepath.IsAbs(dir) && d.File() != "" {
						dir = filepath.Join(filepath.Dir(d.File()), dir)
					}
					h.Store.Dir = dir
				}
				continue
			}
			h.Store.Addresses, h.Store.Dir = args, ""
		case "master_name":
			if !d.AllArgs(&h.Store.MasterName) {
				return d.ArgErr()
			}
		case "cluster":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.Store.Cluster = true
		case "username":
			if !d.AllArgs(&h.Store.Username) {
				return d.ArgErr()
			}
		case "password":
			if !d.AllArgs(&h.Store.Password) {
				return d.ArgErr()
			}
		case "tls":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.Store.TLS = true
		case "allow_eviction":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.Store.AllowEviction = true
		case "tls_server_name":
			if !d.AllArgs(&h.Store.TLSServerName) {
				return d.ArgErr()
			}
		case "tls_ca_file":
			var file string
			if !d.AllArgs(&file) {
				return d.ArgErr()
			}
			if !filepath.IsAbs(file) && d.File() != "" {
				file = filepath.Join(filepath.Dir(d.File()), file)
			}
			h.Store.TLSCAFile = file
		case "secret":
			if !d.AllArgs(&h.Store.Secret) {
				return d.ArgErr()
			}
			if !strings.Contains(h.Store.Secret, "{") && len(h.Store.Secret) < keying.MinSecretLen {
				return d.Errf("secret: %d bytes, at least %d needed", len(h.Store.Secret), keying.MinSecretLen)
			}
		case "key_prefix":
			if !d.AllArgs(&h.Store.KeyPrefix) {
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
			h.Store.WaitReplicas = n
			if len(args) == 2 {
				if args[1] != "strict" {
					return d.Errf("%s: %q is not strict", opt, args[1])
				}
				if n == 0 {
					return d.Errf("%s: strict needs at least one replica", opt)
				}
				h.Store.WaitStrict = true
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
			switch opt {
			case "db":
				h.Store.DB = n
			default:
				h.Store.PoolSize = n
			}
		case "cache_size":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			n, err := humanize.ParseBytes(v)
			if err != nil || n == 0 || n > 1<<40 {
				return d.Errf("cache_size: %q is not a size such as 64MiB", v)
			}
			h.Store.CacheSize = int64(n)
		case "dial_timeout", "op_timeout", "wait_timeout":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(s)
			if err != nil || dur <= 0 {
				return d.Errf("%s: %q is not a positive duration", opt, s)
			}
			switch opt {
			case "dial_timeout":
				h.Store.DialTimeout = caddy.Duration(dur)
			case "op_timeout":
				h.Store.OpTimeout = caddy.Duration(dur)
			default:
				h.Store.WaitTimeout = caddy.Duration(dur)
			}
		default:
			return d.Errf("unrecognized idempotency option '%s'", opt)
		}
	}
	if rulesFile == "" {
		return d.Err("idempotency: a rules file is required (rules <file>)")
	}
	// Read after the whole block, so that the rules are checked against
	// the store options wherever they are written.
	rules, err := config.Load(rulesFile, config.Limits{OpTimeout: h.Store.opTimeout()})
	if err != nil {
		return d.Errf("rules: %v", err)
	}
	h.Rules = *rules
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Handler)(nil)
