package postgres

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

func init() { caddy.RegisterModule(Module{}) }

// Module is the Postgres record store as a Caddy guest module,
// idempotency.stores.postgres: for teams that run Postgres already,
// shared by every gateway on the same database and schema. One open
// engine is shared by every config whose options resolve to the same
// PoolKey.
type Module struct {
	// URL is the connection string, parsed by pgx:
	// `postgres://user:pass@host:5432/db?sslmode=verify-full` (libpq's
	// parameters, several hosts for a failover pair with
	// target_session_attrs=read-write), or key=value pairs. Placeholders
	// such as `{env.PGPASSWORD}` are replaced when the config is loaded.
	// The password is never logged.
	URL string `json:"url,omitempty"`
	// ListenURL is where the connection that LISTENs for the notices
	// that wake waiting duplicates goes, when URL is a pooler in
	// transaction mode: LISTEN needs a session, so point it at Postgres
	// directly (or at a session-mode pool). Default: URL.
	ListenURL string `json:"listen_url,omitempty"`
	// Schema holds the store's tables, made and migrated at start, apart
	// from the application's own. Default: `idemgate`.
	Schema string `json:"schema,omitempty"`
	// PoolSize is the most connections the gateway opens. Default: 16
	// (or the number of CPUs, when larger): a claim holds its connection
	// while its commit waits for the disk.
	PoolSize int `json:"pool_size,omitempty"`
	// OpTimeout bounds every store call, so a hung database cannot hang
	// requests. Default: 2s.
	OpTimeout caddy.Duration `json:"op_timeout,omitempty"`
	// TLSCAFile is a PEM file of the certificate authorities that sign
	// the server's certificate, for a private CA (the URL's sslmode
	// decides whether TLS is used and what is verified; sslrootcert in the
	// URL does the same).
	TLSCAFile string `json:"tls_ca_file,omitempty"`

	url, listenURL string // placeholders replaced
	key            string
}

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "idempotency.stores.postgres",
		New: func() caddy.Module { return new(Module) },
	}
}

// Provision registers the store's metrics, replaces placeholders and
// parses the URL, so a bad one fails the config, not the first request.
func (m *Module) Provision(ctx caddy.Context) error {
	if err := RegisterMetrics(ctx.GetMetricsRegistry()); err != nil {
		caddy.Log().Named("http.handlers.idempotency").Warn("registering the Postgres store's metrics", zap.Error(err))
	}
	repl := caddy.NewReplacer()
	m.url, m.listenURL = repl.ReplaceAll(m.URL, ""), repl.ReplaceAll(m.ListenURL, "")
	for _, u := range []string{m.url, m.listenURL} {
		if _, err := pgxpool.ParseConfig(u); u != "" && err != nil {
			return fmt.Errorf("postgres store: %w", err) // pgx redacts the password
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q|%q|%q|%d|%d|%q", m.url, m.listenURL, m.Schema, m.PoolSize, m.OpTimeout, m.TLSCAFile)
	if m.TLSCAFile != "" {
		pem, _ := os.ReadFile(m.TLSCAFile) // a rotated CA reconnects on reload
		fmt.Fprintf(h, "|%x", sha256.Sum256(pem))
	}
	m.key = "postgres|" + hex.EncodeToString(h.Sum(nil))
	return nil
}

// Validate checks the options.
func (m *Module) Validate() error {
	switch {
	case m.URL == "":
		return errors.New("postgres store: no url")
	case m.PoolSize < 0:
		return fmt.Errorf("postgres store: pool_size %d is negative", m.PoolSize)
	case m.OpTimeout < 0:
		return errors.New("postgres store: op_timeout is negative")
	case m.Schema != "" && len(m.Schema) > 63:
		return fmt.Errorf("postgres store: schema %q is longer than Postgres's 63 bytes", m.Schema)
	}
	if err := checkSchema(m.Schema); err != nil {
		return fmt.Errorf("postgres store: %w", err)
	}
	return nil
}

// PoolKey identifies the pool these options open: a hash, so it holds
// no password.
func (m *Module) PoolKey() string { return m.key }

// Timeout bounds every store call: OpTimeout or its default.
func (m *Module) Timeout() time.Duration {
	if m.OpTimeout > 0 {
		return time.Duration(m.OpTimeout)
	}
	return store.DefaultOpTimeout
}

// OpenEngine connects and migrates the schema. The engine reports to
// Caddy's current default logger, since it outlives the config that
// opened it.
func (m *Module) OpenEngine() (store.Engine, error) {
	log := caddy.Log().Named("http.handlers.idempotency")
	opts := Options{
		URL:       m.url,
		ListenURL: m.listenURL,
		Schema:    m.Schema,
		PoolSize:  int32(m.PoolSize),
		OpTimeout: time.Duration(m.OpTimeout),
		OnError:   func(err error) { log.Error("postgres store", zap.Error(err)) },
	}
	if m.TLSCAFile != "" {
		opts.ConfigurePool = func(cfg *pgxpool.Config) error { return useCAs(cfg, m.TLSCAFile) }
	}
	e, err := Open(opts)
	if err != nil {
		return nil, err
	}
	log.Info("postgres store opened", zap.String("url", Redacted(m.url)), zap.String("schema", e.Schema()))
	return e, nil
}

// useCAs makes the TLS connections of cfg (its host and its fallbacks)
// trust the certificate authorities in file.
func useCAs(cfg *pgxpool.Config, file string) error {
	pem, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("tls_ca_file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("tls_ca_file %s: no PEM certificate in it", file)
	}
	cc := cfg.ConnConfig
	if cc.TLSConfig == nil {
		return fmt.Errorf("tls_ca_file %s: the url's sslmode uses no TLS (sslmode=verify-full uses it)", file)
	}
	cc.TLSConfig.RootCAs = roots
	for _, fb := range cc.Fallbacks {
		if fb.TLSConfig != nil {
			fb.TLSConfig.RootCAs = roots
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner = (*Module)(nil)
	_ caddy.Validator   = (*Module)(nil)
)
