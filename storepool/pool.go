// Package storepool owns the record stores a process has open: it opens
// each engine once, shares it across config reloads, keeps it open while
// requests of a replaced config still use it, closes it when its last
// user is gone, and lists the stores in use, with their routes and the
// handlers' operator actions, for the operator service (package
// operator).
package storepool

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
)

// Module is a record store engine as a Caddy guest module in the
// namespace idempotency.stores, as reverse_proxy takes its transport: it
// owns its options, its Caddyfile (caddyfile.Unmarshaler, given the
// `store` line and the store's options as one block) and their checks
// (caddy.Provisioner, caddy.Validator), and opens its engine.
type Module interface {
	caddy.Module
	// PoolKey identifies the engine the options open, after Provision:
	// configs with the same key share one open engine across reloads. It
	// must hold no secret in clear.
	PoolKey() string
	// OpenEngine opens the engine. It is called once per pool key while
	// no loaded config has it open; the engine is closed when the last
	// config using it is gone.
	OpenEngine() (store.Engine, error)
	// Timeout bounds each call to the engine.
	Timeout() time.Duration
}

// Pool opens record stores, shares each across config reloads, keeps it
// open while requests of a replaced config still use it, lists the
// stores in use for the operator service, and closes each when its last
// user is gone.
//
// On a reload Caddy provisions the new config before it cleans up the old
// one, so a store's count in the pool goes 1 → 2 → 1 and the store (an
// embedded store's open DIR and its lock, a Redis connection pool) lives
// on. Caddy cleans up the old config as soon as its servers have begun
// shutting down, not when their requests are done: a handler's use of the
// store is given back only when the last of its requests has left.
type Pool struct {
	pool *caddy.UsagePool // open engines by pool key

	salt [16]byte // makes store tags unguessable from their (secret) keys

	mu   sync.Mutex
	seq  uint64
	uses map[uint64]*Use
}

// New returns an empty pool.
func New() *Pool {
	p := &Pool{pool: caddy.NewUsagePool(), uses: map[uint64]*Use{}}
	_, _ = rand.Read(p.salt[:])
	return p
}

// openEngine is one open engine in the pool.
type openEngine struct{ store.Engine }

// Destruct closes the engine when the last config using it is cleaned up.
func (e openEngine) Destruct() error { return e.Close() }

// Use is one provisioned handler's use of a store.
type Use struct {
	pool    *Pool
	seq     uint64
	key     string // the pool key: may contain a hash of a password, never shown
	engine  store.Engine
	routes  []config.Resolved
	actions operator.Actions
	logger  *zap.Logger

	active   atomic.Int64 // requests (and their background store calls) under way
	retired  atomic.Bool  // the handler was cleaned up
	tracked  atomic.Bool  // listed for the operator service
	released sync.Once
	err      error
}

// Open returns a use of the store m selects, opening it when no loaded
// config has it open yet, and lists it, with the handler's routes and
// its operator actions, for the operator service.
func (p *Pool) Open(m Module, routes []config.Resolved, actions operator.Actions, logger *zap.Logger) (*Use, error) {
	key := m.PoolKey()
	val, _, err := p.pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		e, err := m.OpenEngine()
		if err != nil {
			return nil, err
		}
		return openEngine{Engine: e}, nil
	})
	if err != nil {
		return nil, err
	}
	u := &Use{pool: p, key: key, engine: val.(openEngine).Engine, routes: routes, actions: actions, logger: logger}
	p.track(u)
	return u, nil
}

// Engine is the open engine.
func (u *Use) Engine() store.Engine { return u.engine }

// track lists u for the operator service.
func (p *Pool) track(u *Use) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	u.seq = p.seq
	p.uses[u.seq] = u
	u.tracked.Store(true)
}

// untrack takes u off the operator service's list.
func (p *Pool) untrack(u *Use) {
	if !u.tracked.Swap(false) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.uses, u.seq)
}

// Uses counts the handlers listed as using the store of u's pool key.
func (p *Pool) Uses(u *Use) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.uses {
		if v.key == u.key {
			n++
		}
	}
	return n
}

// Enter marks the start of work that uses the store: a request, or a
// background call or check made for one. A nil use (a handler built in a
// test, without Provision) counts nothing.
func (u *Use) Enter() {
	if u != nil {
		u.active.Add(1)
	}
}

// Active counts the work under way that entered.
func (u *Use) Active() int64 { return u.active.Load() }

// Leave marks the end of work that entered; the last one out after
// Retire gives the store back.
func (u *Use) Leave() {
	if u != nil && u.active.Add(-1) == 0 && u.retired.Load() {
		if err := u.release(); err != nil {
			u.logger.Error("closing the record store of a replaced config", zap.Error(err))
		}
	}
}

// Retire ends the handler's use: off the operator service's list at
// once, and the store given back now when no request of the handler is
// running, else when the last one is done.
func (u *Use) Retire() error {
	u.pool.untrack(u)
	u.retired.Store(true)
	if n := u.active.Load(); n > 0 {
		u.logger.Debug("config replaced; its record store stays open until its requests are done", zap.Int64("requests", n))
		return nil
	}
	return u.release()
}

// release gives the use's reference back to the pool, once.
func (u *Use) release() error {
	u.released.Do(func() {
		if u.pool.pool != nil {
			_, u.err = u.pool.pool.Delete(u.key)
		}
	})
	return u.err
}

// Live returns the distinct stores in use, in a stable order, as the
// operator service sees them: each with the routes of the handlers that
// use it (the newest config's route of a name wins) and their actions.
func (p *Pool) Live() []operator.LiveStore {
	p.mu.Lock()
	uses := make([]*Use, 0, len(p.uses))
	for _, u := range p.uses {
		uses = append(uses, u)
	}
	p.mu.Unlock()
	slices.SortFunc(uses, func(a, b *Use) int { return cmp.Compare(a.seq, b.seq) })
	return p.live(uses)
}

// Live returns u alone as a live store: one handler's view.
func (u *Use) Live() operator.LiveStore { return u.pool.live([]*Use{u})[0] }

// live groups uses, oldest first, by store.
func (p *Pool) live(uses []*Use) []operator.LiveStore {
	byKey := map[string]int{}
	var out []operator.LiveStore
	var acts []*byRoute
	for _, u := range uses {
		i, ok := byKey[u.key]
		if !ok {
			i = len(out)
			byKey[u.key] = i
			sum := sha256.Sum256(append(p.salt[:], u.key...))
			a := &byRoute{routes: map[string]operator.Actions{}}
			acts = append(acts, a)
			out = append(out, operator.LiveStore{Tag: hex.EncodeToString(sum[:6]), Routes: map[string]config.Resolved{}, Actions: a})
		}
		// The newest use's engine, routes and actions win.
		out[i].Store = u.engine
		acts[i].newest = u.actions
		for _, rt := range u.routes {
			out[i].Routes[rt.Name] = rt
			acts[i].routes[rt.Name] = u.actions
		}
	}
	slices.SortFunc(out, func(a, b operator.LiveStore) int { return strings.Compare(a.Tag, b.Tag) })
	return out
}

// byRoute runs an action with the handler whose config has the record's
// route; a record of a route no handler has any more goes to the newest
// handler, which refuses it.
type byRoute struct {
	routes map[string]operator.Actions
	newest operator.Actions
}

func (b *byRoute) of(route string) operator.Actions {
	if a := b.routes[route]; a != nil {
		return a
	}
	return b.newest
}

// CheckOutcome runs the check with the handler of the record's route.
func (b *byRoute) CheckOutcome(ctx context.Context, rec *store.Record, act store.Action) (*store.Record, string, error) {
	return b.of(rec.Route).CheckOutcome(ctx, rec, act)
}

// Run runs the re-drive with the handler of the record's route.
func (b *byRoute) Run(ctx context.Context, rec *store.Record, act store.Action) (*store.Record, int, error) {
	return b.of(rec.Route).Run(ctx, rec, act)
}
