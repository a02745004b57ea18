package embedded

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

func init() { caddy.RegisterModule(Module{}) }

// Module is the embedded record store as a Caddy guest module,
// idempotency.stores.embedded: durable, in a directory that one gateway
// process owns, for one instance (several gateways need Redis). It is the
// store when a config names none.
type Module struct {
	// Dir is the store's directory, which one gateway process owns: a
	// second process on the same Dir refuses to start. Default: Caddy's
	// data directory + `/idemgate`.
	Dir string `json:"dir,omitempty"`

	// CacheSize bounds the store's memory for records: its block cache,
	// in bytes (Caddyfile: a size such as `64MiB`). The records themselves
	// live on disk, so memory stays flat however many Dir holds. Default:
	// 16 MiB.
	CacheSize int64 `json:"cache_size,omitempty"`

	// OpTimeout bounds how long a store call waits for a record's lock
	// and its write. Default: 2s.
	OpTimeout caddy.Duration `json:"op_timeout,omitempty"`

	// SyncInterval is the longest a stored result waits for the fsync
	// that makes it survive a machine crash. A claim is synced to disk
	// before its request is forwarded; a result is applied and written
	// to the log file (a killed process loses nothing) before its answer
	// goes out, and synced by the next claim's fsync or by a background
	// sync at most this much later. A machine crash (power cut, kernel
	// panic) within that window can bring a result back as its claim,
	// whose lease runs out into outcome unknown (or a verification
	// check): never executed again. Default: 100ms.
	SyncInterval caddy.Duration `json:"sync_interval,omitempty"`

	dir string // Dir made absolute, or the default
}

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "idempotency.stores.embedded",
		New: func() caddy.Module { return new(Module) },
	}
}

// Provision resolves the directory.
func (m *Module) Provision(caddy.Context) error {
	dir := m.Dir
	if dir == "" {
		dir = filepath.Join(caddy.AppDataDir(), "idemgate")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("embedded store: dir %s: %w", dir, err)
	}
	m.dir = abs
	return nil
}

// Validate checks the options.
func (m *Module) Validate() error {
	switch {
	case m.CacheSize < 0:
		return fmt.Errorf("cache_size %d is negative", m.CacheSize)
	case m.OpTimeout < 0:
		return errors.New("op_timeout is negative")
	case m.SyncInterval < 0:
		return errors.New("sync_interval is negative")
	}
	return nil
}

// PoolKey identifies the open store: one per directory, however it is
// written.
func (m *Module) PoolKey() string { return "embedded|" + m.dir }

// Timeout bounds every store call: OpTimeout or its default.
func (m *Module) Timeout() time.Duration {
	if m.OpTimeout > 0 {
		return time.Duration(m.OpTimeout)
	}
	return store.DefaultOpTimeout
}

// OpenEngine opens the directory for this process. It is called once per
// directory while no loaded config has it open; the store reports to
// Caddy's current default logger, since it outlives the config that
// opened it.
func (m *Module) OpenEngine() (store.Engine, error) {
	log := caddy.Log().Named("http.handlers.idempotency")
	e, err := Open(Options{
		Dir:          m.dir,
		OpTimeout:    time.Duration(m.OpTimeout),
		CacheSize:    m.CacheSize,
		SyncInterval: time.Duration(m.SyncInterval),
		OnError:      func(err error) { log.Error("embedded store", zap.Error(err)) },
	})
	if err != nil {
		return nil, err
	}
	rec := e.Recovered()
	for _, d := range rec.Dropped {
		log.Warn("embedded store: the last write before the crash is dropped", zap.String("dir", e.Dir()), zap.String("detail", d))
	}
	log.Info("embedded store opened: durable, for this one gateway (several gateways need Redis)",
		zap.String("dir", e.Dir()), zap.Int("imported_records", rec.Imported), zap.Duration("took", rec.Took))
	return e, nil
}

// Interface guards
var (
	_ caddy.Provisioner = (*Module)(nil)
	_ caddy.Validator   = (*Module)(nil)
)
