// Package caddymodule is the Caddy side of Idemgate: the HTTP handler
// http.handlers.idempotency, its Caddyfile directive, the shared
// record-store connections, and the operator API admin.api.idempotency.
//
// A guarded request goes through the handler top to bottom:
// match route → derive key → claim → forward → record → complete.
package caddymodule

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler guards unmodified upstream APIs against duplicate execution.
// Requests that match a route rule are keyed, claimed atomically in the
// record store, forwarded once, and their responses stored and replayed to
// retries. Requests that match no rule pass through untouched.
type Handler struct {
	// RulesFile is the path of a YAML file with route rules (`defaults:` and
	// `routes:`), read when the config is provisioned and Routes is empty.
	// The Caddyfile `rules` option does not use this field: it reads the file
	// while adapting and inlines the rules, so a changed file is a changed
	// config and `caddy reload` applies it.
	RulesFile string `json:"rules_file,omitempty"`

	// Rules are the inline route rules, in the same schema as the YAML file:
	// `defaults` (the policy every route inherits) and `routes` (matched in
	// order; the first match guards the request).
	config.Rules

	// Store selects the record store. Without addresses it is the embedded
	// store: an in-process Redis-compatible server for one instance, not
	// durable.
	Store StoreConfig `json:"store,omitempty"`

	routes   []*route
	store    *store.Store
	storeKey string
	adminReg uint64 // this handler's entry in liveStores
	use      *storeUse
	logger   *zap.Logger
	metrics  *metrics
}

// storeUse keeps a config's shared store connection open while requests
// of that config still use it. On a reload Caddy cleans up the old config
// as soon as its servers have begun shutting down, not when their
// requests are done: a call that was forwarded under the old config must
// still be able to record its outcome afterwards.
type storeUse struct {
	active  atomic.Int64 // requests (and their background store calls) under way
	retired atomic.Bool  // Cleanup ran
	once    sync.Once
	err     error
}

// enter marks the start of work that uses the store.
func (h *Handler) enter() {
	if h.use != nil {
		h.use.active.Add(1)
	}
}

// leave marks the end of work that entered; the last one out after
// Cleanup releases the store.
func (h *Handler) leave() {
	if h.use == nil {
		return
	}
	if h.use.active.Add(-1) == 0 && h.use.retired.Load() {
		if err := h.releaseStoreOnce(); err != nil {
			h.logger.Error("closing the record store of a replaced config", zap.Error(err))
		}
	}
}

// releaseStoreOnce gives this handler's reference to the shared store
// back to the pool, once.
func (h *Handler) releaseStoreOnce() error {
	h.use.once.Do(func() { h.use.err = releaseStore(h.storeKey) })
	return h.use.err
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision loads the route rules and connects to the record store.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()

	err := h.provisionRoutes(ctx)
	if err != nil {
		return err
	}

	h.metrics = registerMetrics(ctx.GetMetricsRegistry(), h.logger)

	h.use = new(storeUse)
	h.store, h.storeKey, err = acquireStore(h.Store, h.logger)
	if err != nil {
		return fmt.Errorf("idempotency store: %w", err)
	}
	h.adminReg = liveStores.add(h.storeKey, h.store, h.routes)
	return nil
}

// Validate checks the provisioned handler.
func (h *Handler) Validate() error {
	if len(h.routes) == 0 {
		return errors.New("idempotency: no routes configured (set rules or routes)")
	}
	return nil
}

// Cleanup takes the store off the operator API's list and releases this
// config's reference to the shared store connection: at once when no
// request of this config is running, else when the last one is done (a
// reload replaced the config while calls made under it were running).
// It is safe to call when Provision failed.
func (h *Handler) Cleanup() error {
	if h.storeKey == "" {
		return nil
	}
	liveStores.remove(h.adminReg)
	h.use.retired.Store(true)
	if n := h.use.active.Load(); n > 0 {
		h.logger.Debug("config replaced; its record store stays open until its requests are done", zap.Int64("requests", n))
		return nil
	}
	return h.releaseStoreOnce()
}

// opTimeout bounds every store call made outside a request's own lifetime.
func (h *Handler) opTimeout() time.Duration {
	if d := time.Duration(h.Store.OpTimeout); d > 0 {
		return d
	}
	return 2 * time.Second
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
