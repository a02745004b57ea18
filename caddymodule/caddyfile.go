package caddymodule

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/storepool"
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
//	    secret       <secret>               # record ids are keyed with it (default: kept in the store)
//	    max_buffered <size>                 # request-body bytes held at once by the process (default 256MiB)
//	    store        embedded [<dir>] | <redis-url> [<redis-url>...] | <postgres-url> | <engine> [<args>...]
//	    <store option> ...                  # any other option is the store's
//	}
//
// The store is a module in the namespace idempotency.stores: `store
// embedded` (the default) selects idempotency.stores.embedded, a
// postgres:// URL idempotency.stores.postgres, another address
// idempotency.stores.redis, another name the engine registered under it.
// The store's options (cache_size; master_name, cluster, wait_replicas,
// op_timeout, ...) are written beside `store`, or in a block after it, and
// are read by the store module (see its UnmarshalCaddyfile).
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
	var (
		rulesFile string
		storeLine []caddyfile.Token   // store <engine or addresses> [args...]
		storeOpts [][]caddyfile.Token // the store's options, a line each
	)
	for d.NextBlock(0) {
		switch opt := d.Val(); opt {
		case "rules":
			if !d.AllArgs(&rulesFile) {
				return d.ArgErr()
			}
			if !filepath.IsAbs(rulesFile) && d.File() != "" {
				rulesFile = filepath.Join(filepath.Dir(d.File()), rulesFile)
			}
		case "secret":
			if !d.AllArgs(&h.Secret) {
				return d.ArgErr()
			}
			if !strings.Contains(h.Secret, "{") && len(h.Secret) < keying.MinSecretLen {
				return d.Errf("secret: %d bytes, at least %d needed", len(h.Secret), keying.MinSecretLen)
			}
		case "max_buffered":
			var size string
			if !d.AllArgs(&size) {
				return d.ArgErr()
			}
			if err := h.MaxBuffered.UnmarshalJSON([]byte(strconv.Quote(size))); err != nil || h.MaxBuffered <= 0 {
				return d.Errf("max_buffered: %q is not a positive size like 256MiB", size)
			}
		case "store":
			if storeLine != nil {
				return d.Err("store: given twice")
			}
			storeLine = lineTokens(d)
			if len(storeLine) < 2 {
				return d.ArgErr()
			}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				storeOpts = append(storeOpts, lineTokens(d))
			}
		default:
			// The store's own options, for the store module to read.
			storeOpts = append(storeOpts, lineTokens(d))
		}
	}
	if rulesFile == "" {
		return d.Err("idempotency: a rules file is required (rules <file>)")
	}
	mod, err := storepool.UnmarshalCaddyfile(storeLine, storeOpts)
	if err != nil {
		return err
	}
	h.Store = caddyconfig.JSONModuleObject(mod, "engine", storepool.EngineName(mod), nil)
	// Read after the whole block, so that the rules are checked against
	// the store options wherever they are written.
	rules, err := config.Load(rulesFile, config.Limits{OpTimeout: mod.Timeout()})
	if err != nil {
		return d.Errf("rules: %v", err)
	}
	// Warnings name the file and line here; the handler logs them again
	// when it provisions, from the inlined rules, by field.
	for _, w := range rules.Warnings() {
		caddy.Log().Named("http.handlers.idempotency").Warn("route rules warning", zap.String("warning", w.Error()))
	}
	h.Rules = *rules
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Handler)(nil)

// lineTokens returns the current token and the rest of its line.
func lineTokens(d *caddyfile.Dispenser) []caddyfile.Token {
	line := []caddyfile.Token{d.Token()}
	for d.NextArg() {
		line = append(line, d.Token())
	}
	return line
}
