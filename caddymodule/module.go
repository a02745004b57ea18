// Package caddymodule is the Caddy side of Idemgate: the HTTP handler
// http.handlers.idempotency, its Caddyfile directive, the shared
// record-store connections, and the operator API admin.api.idempotency.
//
// A guarded request goes through the handler top to bottom, one file per
// step: match → key → claim → (check) → forward → record → answer (see
// ServeHTTP and docs/request-path.md).
package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/redrive"
	"github.com/idemgate/idemgate/routematch"
	"github.com/idemgate/idemgate/sealed"
	"github.com/idemgate/idemgate/secret"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/storepool"
	"github.com/idemgate/idemgate/unrecorded"
	"github.com/idemgate/idemgate/verify"
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

	// Store is the record store: a module in the namespace
	// idempotency.stores, named by "engine": "embedded" (durable, in a
	// directory this gateway owns, for one instance) or "redis" (shared by
	// every gateway that uses it). Default: the embedded store.
	Store json.RawMessage `json:"store,omitempty" caddy:"namespace=idempotency.stores inline_key=engine"`

	// Secret is the deployment secret under which record ids are derived
	// (HMAC-SHA-256 of operation, scope and key), at least 16 bytes.
	// Placeholders such as `{env.IDEMGATE_SECRET}` or `{file.PATH}` are
	// replaced when the config is loaded. It is never logged. Default: the
	// secret kept in the store, created by the first gateway that uses it,
	// so that every instance sharing the store derives the same ids.
	// Required when a route keeps requests (keep_request): they are
	// sealed under a key derived from this secret alone, never from the
	// one the store keeps beside them.
	Secret string `json:"secret,omitempty"`

	// MaxBuffered caps the bytes of request bodies held at once by the
	// whole process: a guarded request's body is read whole to key and
	// fingerprint it, before its duplicate can be recognised. A request
	// whose body would take the process past it is answered 503 busy
	// (problem+json, Retry-After: 1) before anything is claimed or
	// forwarded. The count is the process's, across every handler and
	// config reload; each handler refuses when the count would pass its
	// own value. A number of bytes or a size like "256MiB", at least every
	// route's max_body. Default 256MiB.
	MaxBuffered config.Size `json:"max_buffered,omitempty"`

	routes   []*route
	matcher  *routematch.Table // the routes' methods and paths, in order
	live     []routeRuntime    // by route, as routes
	ids      *keying.IDKey     // derives record ids under the deployment secret
	seal     *sealed.Sealer    // encrypts kept requests under a key derived from the configured secret; nil without one
	storeMod StoreModule       // the loaded Store module
	store    store.Engine
	notices  store.Notices                           // completion notices, when a route waits for them
	use      *storepool.Use                          // the handler's use of the store (see package storepool)
	verifier *verify.Verifier                        // settles held records with the upstream (package verify)
	kept     *unrecorded.Completions[keptCompletion] // results kept for want of room: the process's (see record.go)
	// breakerKeys are the handler's references to its routes' breakers
	// (see breakerOwner), given back at Cleanup.
	breakerKeys []string
	logger      *zap.Logger
	metrics     *metrics.Set
	// bufferBudget is max_buffered in bytes, resolved at Provision (0,
	// before it: bodies are counted but never refused).
	bufferBudget int64
	redriveTo    *redrive.To   // where re-drives go (see package redrive)
	calls        *runningCalls // MCP tool calls this handler runs (see mcp.go); nil until the first
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

	// The store module first: the rules are checked against its timeout.
	if err := h.loadStore(ctx); err != nil {
		return fmt.Errorf("idempotency store: %w", err)
	}
	err := h.provisionRoutes(ctx)
	if err != nil {
		return err
	}
	if err := secret.NeededToKeep(h.Secret, h.keepingRoutes()); err != nil {
		return err
	}

	h.metrics = metrics.Register(ctx.GetMetricsRegistry(), h.logger, verify.Verifications, bufferedBytes)
	h.bufferBudget = h.maxBuffered()

	h.use, err = storepool.Default().Open(h.storeMod, h.resolved(), operatorActions{h}, h.logger)
	if err != nil {
		return fmt.Errorf("idempotency store: %w", err)
	}
	h.store = h.use.Engine()
	if h.ids, h.seal, err = secret.Provision(ctx, h.Secret, h.store, h.keepingRoutes(), h.logger); err != nil {
		return fmt.Errorf("idempotency store: %w", err)
	}
	h.verifier = verify.New(verify.Config{
		Store: h.store, Routes: h.resolvedRoutes(), Use: h.use, OpTimeout: h.opTimeout(),
		Logger: h.logger, Metrics: h.metrics,
	})
	h.kept = keptResults
	h.provisionRedrive(ctx)
	h.provisionNotices()
	return nil
}

// loadStore loads the Store module, the embedded store when none is
// named; Caddy provisions and validates it.
func (h *Handler) loadStore(ctx caddy.Context) error {
	var (
		mod any
		err error
	)
	if len(h.Store) == 0 {
		mod, err = ctx.LoadModuleByID(storepool.Namespace+"."+storepool.DefaultEngine, json.RawMessage("{}"))
	} else {
		mod, err = ctx.LoadModule(h, "Store")
	}
	if err != nil {
		return err
	}
	sm, ok := mod.(StoreModule)
	if !ok {
		return fmt.Errorf("module %T is not a record store", mod)
	}
	h.storeMod = sm
	return nil
}

// Validate checks the provisioned handler.
func (h *Handler) Validate() error {
	if len(h.routes) == 0 {
		return errors.New("idempotency: no routes configured (set rules or routes)")
	}
	return h.validateBuffered()
}

// Cleanup gives back the handler's breakers, takes the store off the
// operator API's list and releases this config's reference to the shared
// store connection: at once when no request of this config is running,
// else when the last one is done (a reload replaced the config while
// calls made under it were running).
// It is safe to call when Provision failed.
func (h *Handler) Cleanup() error {
	breakers.Unload(h.breakerKeys)
	h.breakerKeys = nil
	if h.use == nil {
		return nil
	}
	return h.use.Retire()
}

// opTimeout bounds every store call made outside a request's own lifetime.
func (h *Handler) opTimeout() time.Duration {
	if h.storeMod != nil {
		return h.storeMod.Timeout()
	}
	return store.DefaultOpTimeout
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
