package store

import (
	"hash/maphash"
	"sync"
)

// Notifier is the optional part of an engine that tells requests of this
// process when a record leaves the in-flight state (completed, released or
// held as outcome unknown by Complete, Release or MarkUnknown), on
// whichever gateway that happened. A duplicate that waits for the first
// request with its key (on_in_flight: wait) is woken by it instead of
// polling the store.
//
// The Redis engine publishes a notice from the completing script itself
// and keeps one subscription per engine, shared by every waiter of the
// process, while waiters need it; the embedded engine notifies in process.
type Notifier interface {
	// Notices returns the engine's notices; they run while Need says
	// that a waiter needs them.
	Notices() Notices
}

// Notices fan the engine's notices out to the watches of this process.
type Notices interface {
	// Watch registers interest in record id. Register before the claim
	// that may find the record in flight: a notice sent after the claim
	// cannot be missed.
	Watch(id string) *Watch
	// Need tells the engine that a waiter waits now, until it calls the
	// returned function (once). Call it before Live. An engine whose
	// notices cost every completion something runs them only while a
	// waiter needs them and a short while after: Redis sends each notice
	// to every subscribed gateway, so a gateway where nobody waits is not
	// subscribed and its completions cost it nothing.
	Need() (done func())
	// Live reports whether notices arrive now. While it is false (a
	// subscription being made, or made anew), a waiter polls the store,
	// no faster than every 50 ms. Every watch is woken when notices stop
	// and again when they start, so one sent in between is not missed.
	Live() bool
}

// Watch is one waiter's interest in one record.
type Watch struct {
	// C receives when a notice for the record arrives (or when notices
	// stop or resume). It holds at most one pending wake-up.
	C <-chan struct{}

	c   chan struct{}
	id  string
	hub *Hub
}

// Stop removes the watch; it is safe to call more than once.
func (w *Watch) Stop() {
	if w.hub != nil {
		w.hub.remove(w)
	}
}

// wake sends one wake-up without blocking: a pending one is enough.
func (w *Watch) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// hubShards spreads watches over several locks, so concurrent requests on
// different keys rarely meet.
const hubShards = 32

// Hub is the in-process fan-out of notices by record id, the part every
// engine's Notices share. The zero Hub is ready to use.
type Hub struct {
	seed   maphash.Seed
	once   sync.Once
	shards [hubShards]hubShard
}

type hubShard struct {
	mu      sync.Mutex
	watches map[string]map[*Watch]struct{}
}

func (h *Hub) shard(id string) *hubShard {
	h.once.Do(func() { h.seed = maphash.MakeSeed() })
	return &h.shards[maphash.String(h.seed, id)%hubShards]
}

// Watch registers interest in id.
func (h *Hub) Watch(id string) *Watch {
	c := make(chan struct{}, 1)
	w := &Watch{C: c, c: c, id: id, hub: h}
	s := h.shard(id)
	s.mu.Lock()
	if s.watches == nil {
		s.watches = map[string]map[*Watch]struct{}{}
	}
	set := s.watches[id]
	if set == nil {
		set = map[*Watch]struct{}{}
		s.watches[id] = set
	}
	set[w] = struct{}{}
	s.mu.Unlock()
	return w
}

func (h *Hub) remove(w *Watch) {
	s := h.shard(w.id)
	s.mu.Lock()
	if set := s.watches[w.id]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(s.watches, w.id)
		}
	}
	s.mu.Unlock()
}

// Notify wakes every watch of id.
func (h *Hub) Notify(id string) {
	s := h.shard(id)
	s.mu.Lock()
	for w := range s.watches[id] {
		w.wake()
	}
	s.mu.Unlock()
}

// WakeAll wakes every watch: notices stopped or resumed, so each waiter
// looks at its record once.
func (h *Hub) WakeAll() {
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		for _, set := range s.watches {
			for w := range set {
				w.wake()
			}
		}
		s.mu.Unlock()
	}
}

// Watching is how many watches are registered: what waits now.
func (h *Hub) Watching() int {
	n := 0
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		for _, set := range s.watches {
			n += len(set)
		}
		s.mu.Unlock()
	}
	return n
}

// LocalNotices are the notices of an engine that serves one process: its
// own state changes, delivered in process. They are always live.
type LocalNotices struct{ Hub }

// Need costs nothing: in-process notices always run.
func (*LocalNotices) Need() func() { return func() {} }

// Live is always true: nothing can lose an in-process notice.
func (*LocalNotices) Live() bool { return true }
