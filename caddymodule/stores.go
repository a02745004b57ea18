package caddymodule

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

// stores owns the life of every record store the process has open.
var stores = newStoreOwner()

// storeOwner opens record stores, shares each across config reloads,
// keeps it open while requests of a replaced config still use it, lists
// the stores in use for the operator API, and closes each when its last
// user is gone.
//
// On a reload Caddy provisions the new config before it cleans up the old
// one, so a store's count in the pool goes 1 → 2 → 1 and the store (an
// embedded store's open DIR and its lock, a Redis connection pool) lives
// on. Caddy cleans up the old config as soon as its servers have begun
// shutting down, not when their requests are done: a handler's use of the
// store is given back only when the last of its requests has left.
type storeOwner struct {
	pool *caddy.UsagePool // open engines by pool key

	salt [16]byte // makes store tags unguessable from their (secret) keys

	mu   sync.Mutex
	seq  uint64
	uses map[uint64]*storeUse
}

func newStoreOwner() *storeOwner {
	o := &storeOwner{pool: caddy.NewUsagePool(), uses: map[uint64]*storeUse{}}
	_, _ = rand.Read(o.salt[:])
	return o
}

// openEngine is one open engine in the pool.
type openEngine struct{ store.Engine }

// Destruct closes the engine when the last config using it is cleaned up.
func (e openEngine) Destruct() error { return e.Close() }

// storeUse is one provisioned handler's use of a store.
type storeUse struct {
	owner  *storeOwner
	seq    uint64
	key    string // the pool key: may contain a hash of a password, never shown
	engine store.Engine
	routes []*route
	logger *zap.Logger

	active   atomic.Int64 // requests (and their background store calls) under way
	retired  atomic.Bool  // the handler was cleaned up
	tracked  atomic.Bool  // listed for the operator API
	released sync.Once
	err      error
}

// open returns a use of the store m selects, opening it when no loaded
// config has it open yet, and lists it (with routes) for the operator API.
func (o *storeOwner) open(m StoreModule, routes []*route, logger *zap.Logger) (*storeUse, error) {
	key := m.PoolKey()
	val, _, err := o.pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		e, err := m.OpenEngine()
		if err != nil {
			return nil, err
		}
		return openEngine{Engine: e}, nil
	})
	if err != nil {
		return nil, err
	}
	u := &storeUse{owner: o, key: key, engine: val.(openEngine).Engine, routes: routes, logger: logger}
	o.track(u)
	return u, nil
}

// track lists u for the operator API.
func (o *storeOwner) track(u *storeUse) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq++
	u.seq = o.seq
	o.uses[u.seq] = u
	u.tracked.Store(true)
}

// untrack takes u off the operator API's list.
func (o *storeOwner) untrack(u *storeUse) {
	if !u.tracked.Swap(false) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.uses, u.seq)
}

// enter marks the start of work that uses the store: a request, or a
// background call or check made for one. A nil use (a handler built in a
// test, without Provision) counts nothing.
func (u *storeUse) Enter() {
	if u != nil {
		u.active.Add(1)
	}
}

// leave marks the end of work that entered; the last one out after
// retire gives the store back.
func (u *storeUse) Leave() {
	if u != nil && u.active.Add(-1) == 0 && u.retired.Load() {
		if err := u.release(); err != nil {
			u.logger.Error("closing the record store of a replaced config", zap.Error(err))
		}
	}
}

// retire ends the handler's use: off the operator API's list at once, and
// the store given back now when no request of the handler is running,
// else when the last one is done.
func (u *storeUse) retire() error {
	u.owner.untrack(u)
	u.retired.Store(true)
	if n := u.active.Load(); n > 0 {
		u.logger.Debug("config replaced; its record store stays open until its requests are done", zap.Int64("requests", n))
		return nil
	}
	return u.release()
}

// release gives the use's reference back to the pool, once.
func (u *storeUse) release() error {
	u.released.Do(func() {
		if u.owner.pool != nil {
			_, u.err = u.owner.pool.Delete(u.key)
		}
	})
	return u.err
}

// liveStore is one distinct store as the operator API sees it.
type liveStore struct {
	// tag names the store in list cursors: a salted hash of its pool key.
	tag    string
	store  store.Engine
	routes map[string]*route // by name; the newest config's route wins
}

// live returns the distinct stores in use, in a stable order.
func (o *storeOwner) live() []liveStore {
	o.mu.Lock()
	uses := make([]*storeUse, 0, len(o.uses))
	for _, u := range o.uses {
		uses = append(uses, u)
	}
	o.mu.Unlock()
	slices.SortFunc(uses, func(a, b *storeUse) int { return cmp.Compare(a.seq, b.seq) })

	byKey := map[string]int{}
	var out []liveStore
	for _, u := range uses {
		i, ok := byKey[u.key]
		if !ok {
			i = len(out)
			byKey[u.key] = i
			sum := sha256.Sum256(append(o.salt[:], u.key...))
			out = append(out, liveStore{tag: hex.EncodeToString(sum[:6]), routes: map[string]*route{}})
		}
		// The newest use's engine and routes win.
		out[i].store = u.engine
		for _, rt := range u.routes {
			out[i].routes[rt.Name] = rt
		}
	}
	slices.SortFunc(out, func(a, b liveStore) int { return strings.Compare(a.tag, b.tag) })
	return out
}
