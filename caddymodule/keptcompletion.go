package caddymodule

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
)

// A completion the store refused for want of room (store.ErrNoRoom: a
// full disk under the embedded store, a Redis at its maxmemory) is kept
// in memory past its claim's lease and written once the store has room
// again, its claim renewed meanwhile (see keepRecording), so the answer
// the client got is what its retry replays. A retry of its key on this
// gateway writes it first (see writeKept). What is kept is bounded per
// gateway process: past the bound a refused completion is tried until
// its lease runs out, as any other, and the record then becomes outcome
// unknown (held, never executed twice).
const (
	// maxKeptCompletions bounds how many refused completions a gateway
	// keeps. A full disk refuses every completion at once, so the bound
	// is above the calls a gateway ordinarily has at its upstreams when
	// the disk fills.
	maxKeptCompletions = 1024
	// maxKeptBytes bounds the memory their results (bodies and headers)
	// take: 64 results of the largest size a route stores by default
	// (max_response 1 MiB), or a thousand of 64 KiB.
	maxKeptBytes = 64 << 20
)

// errKeptUnwritten: a retry found its key's result kept, and the store
// still refuses it. The retry fails closed whatever the route's
// on_store_error: forwarding it would execute the operation again.
var errKeptUnwritten = errors.New("this gateway keeps the key's result, which the store has no room for yet")

// kept is the process's kept completions: one bound per gateway, across
// its sites and config reloads.
var kept = newKeptCompletions(maxKeptCompletions, maxKeptBytes, metrics.Process.Kept, metrics.Process.KeptBytes)

// keptKey names a record: its store and its id.
type keptKey struct {
	engine store.Engine
	id     string
}

// keptCompletion is one completion kept past its claim's lease.
type keptCompletion struct {
	key   keptKey
	route string
	rec   recording // completing: it keeps its own copy of the body
	size  int64     // what it counts against maxKeptBytes

	mu   sync.Mutex // held while it is written: one try at a time
	done bool       // under mu: written, or its claim was lost
}

// keptCompletions are the completions a gateway keeps, within its bound.
type keptCompletions struct {
	maxCount int
	maxBytes int64
	gauge    prometheus.Gauge // how many are kept
	bytes    prometheus.Gauge // how many bytes they take

	n atomic.Int64 // how many are kept, read without mu on the claim path

	mu    sync.Mutex
	size  int64
	byKey map[keptKey]*keptCompletion // the newest for each record
	kept  map[*keptCompletion]bool
}

func newKeptCompletions(maxCount int, maxBytes int64, gauge, bytes prometheus.Gauge) *keptCompletions {
	return &keptCompletions{
		maxCount: maxCount, maxBytes: maxBytes, gauge: gauge, bytes: bytes,
		byKey: map[keptKey]*keptCompletion{}, kept: map[*keptCompletion]bool{},
	}
}

// keep keeps kc; false when that would pass the bound (nothing is kept).
func (k *keptCompletions) keep(kc *keptCompletion) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.kept) >= k.maxCount || k.size+kc.size > k.maxBytes {
		return false
	}
	k.kept[kc] = true
	k.byKey[kc.key] = kc
	k.size += kc.size
	k.changed()
	return true
}

// forget drops kc, once it is written or given up; a kc not kept is let
// be.
func (k *keptCompletions) forget(kc *keptCompletion) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.kept[kc] {
		return
	}
	delete(k.kept, kc)
	if k.byKey[kc.key] == kc {
		delete(k.byKey, kc.key)
	}
	k.size -= kc.size
	k.changed()
}

// changed publishes the count and size; called with mu held.
func (k *keptCompletions) changed() {
	k.n.Store(int64(len(k.kept)))
	k.gauge.Set(float64(len(k.kept)))
	k.bytes.Set(float64(k.size))
}

// count is how many completions are kept and the bytes they take.
func (k *keptCompletions) count() (int, int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.kept), k.size
}

// find is the completion kept for record id of e, or nil. It takes no
// lock while nothing is kept.
func (k *keptCompletions) find(e store.Engine, id string) *keptCompletion {
	if k.n.Load() == 0 {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byKey[keptKey{e, id}]
}

// resultSize is what a result counts against maxKeptBytes: its body and
// its header's names and values.
func resultSize(res store.Result) int64 {
	n := len(res.Body)
	for name, vv := range res.Header {
		n += len(name)
		for _, v := range vv {
			n += len(v)
		}
	}
	return int64(n)
}
