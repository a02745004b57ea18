// Package unrecorded bounds the completions a gateway holds in memory
// because its record store refused them for want of room (store.ErrNoRoom:
// a full disk under the embedded store, a Redis at its maxmemory): results
// the client has been answered with but the store does not have yet,
// kept past their claim's lease and written once the store has room
// again, so the answer the client got is what its retry replays. What is
// kept is bounded per gateway process: past the bound a refused
// completion is tried until its lease runs out, as any other, and the
// record then becomes outcome unknown (held, never executed twice).
//
// Not to be confused with a kept request (keep_request, sealed.Request,
// store.KeptRequest): the request a record keeps, sealed, for a re-drive.
package unrecorded

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/store"
)

const (
	// MaxCount bounds how many refused completions a gateway keeps. A
	// full disk refuses every completion at once, so the bound is above
	// the calls a gateway ordinarily has at its upstreams when the disk
	// fills.
	MaxCount = 1024
	// MaxBytes bounds the memory their results (bodies and headers)
	// take: 64 results of the largest size a route stores by default
	// (max_response 1 MiB), or a thousand of 64 KiB.
	MaxBytes = 64 << 20
)

// Key names a record: its store and its id.
type Key struct {
	Engine store.Engine
	ID     string
}

// entry is what the bound counts of one kept completion.
type entry struct {
	key  Key
	size int64
}

// Completions are the completions (of type V) a gateway keeps, within
// its bound.
type Completions[V any] struct {
	maxCount int
	maxBytes int64
	gauge    prometheus.Gauge // how many are kept
	bytes    prometheus.Gauge // how many bytes they take

	n atomic.Int64 // how many are kept, read without mu on the claim path

	mu    sync.Mutex
	size  int64
	byKey map[Key]*V // the newest for each record
	kept  map[*V]entry
}

// New keeps at most maxCount completions of maxBytes in all, counted in
// gauge and bytes.
func New[V any](maxCount int, maxBytes int64, gauge, bytes prometheus.Gauge) *Completions[V] {
	return &Completions[V]{
		maxCount: maxCount, maxBytes: maxBytes, gauge: gauge, bytes: bytes,
		byKey: map[Key]*V{}, kept: map[*V]entry{},
	}
}

// Keep keeps v, the completion of record key that takes size bytes;
// false when that would pass the bound (nothing is kept).
func (k *Completions[V]) Keep(key Key, v *V, size int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.kept) >= k.maxCount || k.size+size > k.maxBytes {
		return false
	}
	k.kept[v] = entry{key, size}
	k.byKey[key] = v
	k.size += size
	k.changed()
	return true
}

// Forget drops v, once it is written or given up; a v not kept is let
// be.
func (k *Completions[V]) Forget(v *V) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.kept[v]
	if !ok {
		return
	}
	delete(k.kept, v)
	if k.byKey[e.key] == v {
		delete(k.byKey, e.key)
	}
	k.size -= e.size
	k.changed()
}

// changed publishes the count and size; called with mu held.
func (k *Completions[V]) changed() {
	k.n.Store(int64(len(k.kept)))
	k.gauge.Set(float64(len(k.kept)))
	k.bytes.Set(float64(k.size))
}

// Count is how many completions are kept and the bytes they take.
func (k *Completions[V]) Count() (int, int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.kept), k.size
}

// Bound is the most completions kept and the most bytes they may take.
func (k *Completions[V]) Bound() (int, int64) { return k.maxCount, k.maxBytes }

// Find is the completion kept for record key, or nil. It takes no lock
// while nothing is kept.
func (k *Completions[V]) Find(key Key) *V {
	if k.n.Load() == 0 {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byKey[key]
}

// ResultSize is what a result counts against the bound's bytes: its body
// and its header's names and values.
func ResultSize(res store.Result) int64 {
	n := len(res.Body)
	for name, vv := range res.Header {
		n += len(name)
		for _, v := range vv {
			n += len(v)
		}
	}
	return int64(n)
}
