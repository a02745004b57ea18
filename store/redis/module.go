package redis

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

// Module is the Redis record store as a Caddy guest module,
// idempotency.stores.redis: its options, its Caddyfile block and its
// checks. One open Store is shared by every config whose options resolve
// to the same PoolKey.
type Module struct {
	// Addresses of the Redis servers: `redis://[user:pass@]host:port[/db]`,
	// `rediss://…` for TLS, or bare `host:port` (port 6379 when none).
	// Several addresses are Cluster seeds (with Cluster) or Sentinel
	// addresses (with MasterName). Placeholders such as `{env.REDIS_URL}`
	// are replaced when the config is loaded.
	Addresses []string `json:"addresses,omitempty"`

	// MasterName is the Sentinel master name; Addresses are then the
	// sentinels.
	MasterName string `json:"master_name,omitempty"`

	// Cluster treats Addresses as Redis Cluster seed nodes.
	Cluster bool `json:"cluster,omitempty"`

	// Username for Redis ACL authentication. Placeholders such as
	// `{env.REDIS_USER}` are replaced when the config is loaded.
	Username string `json:"username,omitempty"`

	// Password for Redis authentication. Placeholders such as
	// `{env.REDIS_PASSWORD}` are replaced when the config is loaded. It is
	// never logged.
	Password string `json:"password,omitempty"`

	// DB is the Redis database number (single node and Sentinel only).
	DB int `json:"db,omitempty"`

	// TLS connects to Redis over TLS (implied by a `rediss://` address).
	TLS bool `json:"tls,omitempty"`

	// TLSServerName overrides the server name checked in Redis's TLS
	// certificate.
	TLSServerName string `json:"tls_server_name,omitempty"`

	// TLSCAFile is a PEM file of the certificate authorities that sign
	// Redis's TLS certificate, for a private CA. Default: the system's
	// roots.
	TLSCAFile string `json:"tls_ca_file,omitempty"`

	// KeyPrefix is prepended to every Redis key. Default: `idemgate:`.
	KeyPrefix string `json:"key_prefix,omitempty"`

	// PoolSize is the number of connections per Redis node. Default: ten per
	// CPU.
	PoolSize int `json:"pool_size,omitempty"`

	// DialTimeout bounds connecting to Redis. Default: 2s.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`

	// OpTimeout bounds every Redis call, so a hung Redis cannot hang
	// requests. Default: 2s.
	OpTimeout caddy.Duration `json:"op_timeout,omitempty"`

	// WaitReplicas, when above 0, makes every claim and completion wait
	// until that many replicas acknowledged the write (Redis WAIT, in the
	// same round trip as the write). It narrows the window in which a
	// Sentinel or Cluster failover loses an acknowledged claim. When fewer
	// replicas answer within WaitTimeout the request still goes on (unless
	// WaitStrict): the shortfall is logged and counted
	// (idemgate_store_wait_short_total). Replays never wait.
	WaitReplicas int `json:"wait_replicas,omitempty"`

	// AllowEviction accepts a Redis whose maxmemory-policy may evict
	// records (anything but noeviction; volatile-* too, since every record
	// has a TTL): an evicted record lets a retry execute again. Without
	// it such a Redis is refused at start and on every reconnect, with an
	// error naming the policy. Under an allkeys-* policy, which may evict
	// the deployment secret kept in Redis as well, Secret must be set:
	// the gateway refuses to mint a new secret that would orphan every
	// record.
	AllowEviction bool `json:"allow_eviction,omitempty"`

	// WaitStrict (Caddyfile: `wait_replicas N strict`) refuses a claim that
	// fewer than WaitReplicas replicas acknowledged within WaitTimeout:
	// nothing is forwarded, the client gets 503 with Retry-After (whatever
	// the route's on_store_error), and the claim is released, so a retry
	// may execute once a replica is back. Completions still go on when
	// short (the upstream has acted), and replays never wait.
	WaitStrict bool `json:"wait_strict,omitempty"`

	// WaitTimeout bounds each WAIT. Default: 100ms; it must be shorter than
	// OpTimeout.
	WaitTimeout caddy.Duration `json:"wait_timeout,omitempty"`

	opts Options // resolved by Provision
	key  string  // the pool key of opts
}

func init() { caddy.RegisterModule(Module{}) }

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "idempotency.stores.redis",
		New: func() caddy.Module { return new(Module) },
	}
}

// Provision resolves the options (placeholders replaced) and registers
// the Redis store's metrics.
func (m *Module) Provision(ctx caddy.Context) error {
	registerMetrics(ctx.GetMetricsRegistry())
	opts, err := m.options()
	if err != nil {
		return err
	}
	m.opts = opts
	m.key = m.poolKey(opts)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*Module)(nil)
	_ caddy.Validator       = (*Module)(nil)
	_ caddyfile.Unmarshaler = (*Module)(nil)
)

// Validate checks that the options resolved (see Provision).
func (m *Module) Validate() error {
	if len(m.opts.Addrs) == 0 {
		return errors.New("redis store: no address")
	}
	return nil
}

// PoolKey identifies the connection these options open: configs with the
// same resolved options share one. It is a hash, so it holds no password.
func (m *Module) PoolKey() string { return m.key }

// Timeout bounds every store call: OpTimeout or its default.
func (m *Module) Timeout() time.Duration {
	return durationOr(m.OpTimeout, store.DefaultOpTimeout)
}

// OpenEngine connects to Redis. It is called once per pool key, while no
// loaded config has that connection open; the store reports to Caddy's
// current default logger, since it outlives the config that opened it.
func (m *Module) OpenEngine() (store.Engine, error) {
	installRedisLogger()
	opts := m.opts
	label := m.label()
	opts.OnEvictionCheck = func(ec EvictionCheck) { logEvictionCheck(handlerLog(), ec) }
	opts.OnWaitShort = waitShortLogger(opts.WaitReplicas)
	opts.OnAvailability = availabilityReporter(label, handlerLog)
	s, err := Open(opts)
	if err != nil {
		return nil, err
	}
	s.where = strings.Join(m.redactedAddresses(), ",")
	storeUp.WithLabelValues(label).Set(1)
	s.onClose = func() { storeUp.DeleteLabelValues(label) }
	handlerLog().Debug("record store connected", zap.Strings("addresses", redactAll(m.Addresses)))
	return s, nil
}

// options turns the module's settings into store options, replacing
// placeholders.
func (m *Module) options() (Options, error) {
	c := m
	repl := caddy.NewReplacer()
	opts := Options{
		MasterName:    c.MasterName,
		Cluster:       c.Cluster,
		Username:      repl.ReplaceAll(c.Username, ""),
		Password:      repl.ReplaceAll(c.Password, ""),
		DB:            c.DB,
		KeyPrefix:     c.KeyPrefix,
		PoolSize:      c.PoolSize,
		DialTimeout:   durationOr(c.DialTimeout, 0),
		OpTimeout:     durationOr(c.OpTimeout, 0),
		WaitReplicas:  c.WaitReplicas,
		WaitStrict:    c.WaitStrict,
		AllowEviction: c.AllowEviction,
		WaitTimeout:   durationOr(c.WaitTimeout, 0),
	}
	switch {
	case len(c.Addresses) == 0:
		return opts, errors.New("redis store: no address")
	case c.WaitReplicas < 0:
		return opts, fmt.Errorf("wait_replicas %d is negative", c.WaitReplicas)
	case c.WaitTimeout != 0 && c.WaitReplicas == 0:
		return opts, errors.New("wait_timeout is set but wait_replicas is not")
	case c.WaitStrict && c.WaitReplicas == 0:
		return opts, errors.New("wait_strict is set but wait_replicas is not")
	}
	if c.Cluster && c.MasterName != "" {
		return opts, errors.New("cluster and master_name contradict each other: a Redis Cluster has no Sentinel master; set one of them")
	}
	useTLS := c.TLS
	for _, raw := range c.Addresses {
		addr := repl.ReplaceAll(raw, "")
		if !strings.Contains(addr, "://") {
			opts.Addrs = append(opts.Addrs, withDefaultPort(addr))
			continue
		}
		u, hasDB, err := parseRedisURL(addr)
		if err != nil {
			return opts, fmt.Errorf("store address %q: %w", redactURL(raw), err)
		}
		useTLS = useTLS || u.TLSConfig != nil
		opts.Addrs = append(opts.Addrs, u.Addr)
		if opts.Username == "" {
			opts.Username = u.Username
		}
		if opts.Password == "" {
			opts.Password = u.Password
		}
		if hasDB {
			opts.DB = u.DB
		}
	}
	if c.TLSServerName != "" && !useTLS {
		return opts, errors.New("tls_server_name is set but TLS is not (use tls or rediss://)")
	}
	if c.TLSCAFile != "" && !useTLS {
		return opts, errors.New("tls_ca_file is set but TLS is not (use tls or rediss://)")
	}
	if useTLS {
		opts.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName}
		if c.TLSCAFile != "" {
			pool, err := loadCAs(c.TLSCAFile)
			if err != nil {
				return opts, err
			}
			opts.TLS.RootCAs = pool
		}
	}
	return opts, nil
}

// parseRedisURL reads a redis:// or rediss:// URL with go-redis's own
// parser (a missing port is 6379) and reports whether it names a
// database. Its errors never hold the URL, which may hold a password.
func parseRedisURL(addr string) (opts *goredis.Options, hasDB bool, err error) {
	u, err := url.Parse(addr)
	var ue *url.Error
	switch {
	case errors.As(err, &ue):
		return nil, false, ue.Err
	case err != nil:
		return nil, false, errors.New("not a URL")
	case u.Scheme != "redis" && u.Scheme != "rediss":
		return nil, false, errors.New("scheme must be redis or rediss")
	case u.Host == "":
		return nil, false, errors.New("no host")
	case u.RawQuery != "":
		return nil, false, errors.New("options in the URL are not read; use the store options (pool_size, dial_timeout, ...)")
	}
	opts, err = goredis.ParseURL(addr)
	return opts, strings.Trim(u.Path, "/") != "", err
}

// withDefaultPort adds Redis's port 6379 to a bare host:port address
// that has none.
func withDefaultPort(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"), "6379")
}

// loadCAs reads a PEM file of CA certificates.
func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls_ca_file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// poolKey identifies a store connection shared by configs with the same
// options, taken after placeholder replacement. It is a hash, so the key
// holds no password.
func (m *Module) poolKey(opts Options) string {
	c := m
	h := sha256.New()
	fmt.Fprintf(h, "%q|%q|%t|%q|%q|%d|%t|%q|%q|%d|%d|%d|%d|%d|%t",
		opts.Addrs, opts.MasterName, opts.Cluster, opts.Username, opts.Password, opts.DB,
		opts.TLS != nil, c.TLSServerName, opts.KeyPrefix, opts.PoolSize, opts.DialTimeout, opts.OpTimeout,
		opts.WaitReplicas, opts.WaitTimeout, opts.WaitStrict)
	if opts.AllowEviction {
		h.Write([]byte("|allow_eviction"))
	}
	if c.TLSCAFile != "" {
		// The file's content, so that a reload after a CA rotation
		// reconnects with the new roots.
		pem, _ := os.ReadFile(c.TLSCAFile)
		fmt.Fprintf(h, "|%q|%x", c.TLSCAFile, sha256.Sum256(pem))
	}
	return "redis|" + hex.EncodeToString(h.Sum(nil))
}

// redactedAddresses are the addresses with their placeholders replaced
// and their passwords hidden, for messages.
func (m *Module) redactedAddresses() []string {
	repl := caddy.NewReplacer()
	out := make([]string, len(m.Addresses))
	for i, a := range m.Addresses {
		out[i] = redactURL(repl.ReplaceAll(a, ""))
	}
	return out
}

// redactURL hides the password of a store address in messages, also when
// the address is not a valid URL.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return raw
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

func durationOr(d caddy.Duration, def time.Duration) time.Duration {
	if d > 0 {
		return time.Duration(d)
	}
	return def
}
