package caddymodule

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

// StoreConfig selects and configures the record store.
type StoreConfig struct {
	// Addresses of the Redis servers: `redis://[user:pass@]host:port[/db]`,
	// `rediss://…` for TLS, or bare `host:port`. Empty (or the single word
	// `embedded`) selects the embedded store. Several addresses are Cluster
	// seeds (with Cluster) or Sentinel addresses (with MasterName).
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
}

// embedded reports whether the config selects the embedded store.
func (c StoreConfig) embedded() bool {
	return len(c.Addresses) == 0 || (len(c.Addresses) == 1 && c.Addresses[0] == "embedded")
}

// options turns the config into store options, replacing placeholders.
func (c StoreConfig) options() (store.Options, error) {
	repl := caddy.NewReplacer()
	opts := store.Options{
		MasterName:  c.MasterName,
		Cluster:     c.Cluster,
		Username:    repl.ReplaceAll(c.Username, ""),
		Password:    repl.ReplaceAll(c.Password, ""),
		DB:          c.DB,
		KeyPrefix:   c.KeyPrefix,
		PoolSize:    c.PoolSize,
		DialTimeout: durationOr(c.DialTimeout, 0),
		OpTimeout:   durationOr(c.OpTimeout, 0),
	}
	useTLS := c.TLS
	for _, raw := range c.Addresses {
		addr := repl.ReplaceAll(raw, "")
		if !strings.Contains(addr, "://") {
			opts.Addrs = append(opts.Addrs, addr)
			continue
		}
		u, err := url.Parse(addr)
		if err != nil {
			return opts, fmt.Errorf("store address %q: %w", redactURL(raw), err)
		}
		switch u.Scheme {
		case "redis":
		case "rediss":
			useTLS = true
		default:
			return opts, fmt.Errorf("store address %q: scheme must be redis or rediss", redactURL(raw))
		}
		if u.Host == "" {
			return opts, fmt.Errorf("store address %q: no host", redactURL(raw))
		}
		opts.Addrs = append(opts.Addrs, u.Host)
		if u.User != nil {
			if name := u.User.Username(); name != "" && opts.Username == "" {
				opts.Username = name
			}
			if pass, ok := u.User.Password(); ok && opts.Password == "" {
				opts.Password = pass
			}
		}
		if db := strings.Trim(u.Path, "/"); db != "" {
			n, err := strconv.Atoi(db)
			if err != nil {
				return opts, fmt.Errorf("store address %q: database %q is not a number", redactURL(raw), db)
			}
			opts.DB = n
		}
	}
	if useTLS {
		opts.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName}
	}
	return opts, nil
}

// poolKey identifies a store connection shared by configs with the same
// options, taken after placeholder replacement. It is a hash, so the key
// holds no password.
func (c StoreConfig) poolKey(opts store.Options) string {
	if c.embedded() {
		return "embedded|" + c.KeyPrefix
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q|%q|%t|%q|%q|%d|%t|%q|%q|%d|%d|%d",
		opts.Addrs, opts.MasterName, opts.Cluster, opts.Username, opts.Password, opts.DB,
		opts.TLS != nil, c.TLSServerName, opts.KeyPrefix, opts.PoolSize, opts.DialTimeout, opts.OpTimeout)
	return "redis|" + hex.EncodeToString(h.Sum(nil))
}

// redactURL hides the password of a store address in messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}

func durationOr(d caddy.Duration, def time.Duration) time.Duration {
	if d > 0 {
		return time.Duration(d)
	}
	return def
}

// storePool shares store connections across config reloads: Caddy
// provisions the new config before cleaning up the old one, so the count
// goes 1 → 2 → 1 and the connection (and the embedded store's data) lives on.
var storePool = caddy.NewUsagePool()

type pooledStore struct{ *store.Store }

// Destruct closes the store when the last config using it is cleaned up.
func (p pooledStore) Destruct() error { return p.Close() }

func acquireStore(c StoreConfig, logger *zap.Logger) (*store.Store, string, error) {
	opts, err := c.options()
	if err != nil {
		return nil, "", err
	}
	key := c.poolKey(opts)
	val, loaded, err := storePool.LoadOrNew(key, func() (caddy.Destructor, error) {
		if c.embedded() {
			s, err := store.OpenEmbedded(opts)
			if err != nil {
				return nil, err
			}
			logger.Warn("using the embedded store: one node, in memory, not durable, for a single gateway instance; configure store redis://… for production")
			return pooledStore{s}, nil
		}
		s, err := store.Open(opts)
		if err != nil {
			return nil, err
		}
		return pooledStore{s}, nil
	})
	if err != nil {
		return nil, "", err
	}
	if !loaded {
		logger.Debug("record store connected", zap.Bool("embedded", c.embedded()), zap.Strings("addresses", redactAll(c.Addresses)))
	}
	return val.(pooledStore).Store, key, nil
}

func releaseStore(key string) error {
	_, err := storePool.Delete(key)
	return err
}

func redactAll(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = redactURL(a)
	}
	return out
}
