package embedded

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/idemgate/idemgate/store"
)

// The records in flight that this process claimed, kept in memory, so
// that the completion (or release, or hold) that follows a claim writes
// without reading the record back from Pebble: an execute reads its key
// once, at the claim.
//
// An entry is exactly what the record key (and its attempt count key)
// holds on disk: it is written only under the record's lock, once the
// write it mirrors has landed, and dropped when a write fails, is
// abandoned or leaves the record out of flight, and by every other
// writer of record keys (the sweep, an undo). Readers that do not hold
// the lock (Get, List) read Pebble, which holds the same.
//
// Bounded: at most hotPerStripe entries per lock stripe (so at most
// hotPerStripe × lockStripes records) and hotMaxBytes of record data in
// all; past either bound a claim's record is simply not kept, and the
// completion reads it from Pebble as before. A record whose calls never
// come (its lease runs out) leaves when the sweep expires it.
const (
	hotPerStripe = 4
	hotMaxBytes  = 8 << 20
)

// hotSlots are the entries, one small map per lock stripe, each used only
// under that stripe's lock (no lock of their own).
type hotSlots struct {
	seed   maphash.Seed
	stripe [lockStripes]map[string]hotSlot
	bytes  atomic.Int64
}

// hotSlot is a record key's content and its size as counted.
type hotSlot struct {
	slot
	size int64
}

func (h *hotSlots) init(seed maphash.Seed) { h.seed = seed }

func (h *hotSlots) of(id string) map[string]hotSlot {
	return h.stripe[maphash.String(h.seed, id)%lockStripes]
}

// get returns record id's entry. Called with id's lock held.
func (h *hotSlots) get(id string) (slot, bool) {
	m := h.of(id)
	if m == nil {
		return slot{}, false
	}
	s, ok := m[id]
	return s.slot, ok
}

// drop forgets record id. Called with id's lock held.
func (h *hotSlots) drop(id string) {
	i := maphash.String(h.seed, id) % lockStripes
	if s, ok := h.stripe[i][id]; ok {
		delete(h.stripe[i], id)
		h.bytes.Add(-s.size)
	}
}

// landed records what a write to record id left on disk: s when it
// landed (err nil) and holds a record in flight, else nothing. Called
// with id's lock held.
func (h *hotSlots) landed(id string, sl slot, err error) {
	h.drop(id)
	if err != nil || sl.rec == nil || sl.rec.State != store.StateInFlight {
		return
	}
	s := hotSlot{slot: sl, size: int64(len(sl.rec.Request)+len(sl.rec.Body)) + 512}
	i := maphash.String(h.seed, id) % lockStripes
	m := h.stripe[i]
	if len(m) >= hotPerStripe || h.bytes.Load()+s.size > hotMaxBytes {
		return
	}
	if m == nil {
		m = make(map[string]hotSlot, 1)
		h.stripe[i] = m
	}
	m[id] = s
	h.bytes.Add(s.size)
}
