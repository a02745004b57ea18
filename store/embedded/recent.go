package embedded

import (
	"hash/maphash"
	"sync/atomic"
)

// A record key is read one of two ways (readSlot). Pebble's Get stops at
// the first level that holds the key, so a key written a moment ago is
// answered by the memtable alone; but for a key nobody wrote it reads a
// data block of the last level, whose bloom filters Get skips. A prefix
// seek that consults every level's filters answers a new key from the
// filters, but positions itself in every level even when the memtable
// holds the key. So a key this process wrote recently (a replay of a
// recent execute, the result of a claim no longer kept in memory) is
// read with Get, and any other (a new key's claim, a replay of an older
// record) with the seek.
//
// recentKeys remembers which record keys were written recently: two
// generations of a bit set, each holding the ids of recentGen writes
// (two bits an id); the older one is cleared when the newer fills. It is
// only a hint: both reads return the same, and a wrong hint costs only
// the other read's price. Fixed size: 2 × recentBits bits (256 KiB).
const (
	recentBits = 1 << 20
	recentGen  = 1 << 16
)

type recentKeys struct {
	seed   maphash.Seed
	writes atomic.Uint64
	gen    [2][recentBits / 64]atomic.Uint64
}

func (r *recentKeys) init(seed maphash.Seed) { r.seed = seed }

// bits are id's two bit positions.
func (r *recentKeys) bits(id string) (uint64, uint64) {
	h := maphash.String(r.seed, id)
	return h % recentBits, (h >> 32) % recentBits
}

// mark notes that record id's key is being written.
func (r *recentKeys) mark(id string) {
	n := r.writes.Add(1)
	g := &r.gen[(n/recentGen)%2]
	if n%recentGen == 0 {
		// This generation starts over: forget what it held.
		for i := range g {
			g[i].Store(0)
		}
	}
	a, b := r.bits(id)
	g[a/64].Or(1 << (a % 64))
	g[b/64].Or(1 << (b % 64))
}

// has reports whether record id's key was probably written recently
// (never for an engine that does not write: nil).
func (r *recentKeys) has(id string) bool {
	if r == nil {
		return false
	}
	a, b := r.bits(id)
	for g := range r.gen {
		s := &r.gen[g]
		if s[a/64].Load()&(1<<(a%64)) != 0 && s[b/64].Load()&(1<<(b%64)) != 0 {
			return true
		}
	}
	return false
}
