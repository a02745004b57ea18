package embedded

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// The most common claim is of a key nobody sent before, and a read that
// finds nothing still positions an iterator in every level and asks each
// level's filters (recent.go). knownKeys answers it from memory: a bloom
// filter of the ids of every record key DIR holds (records, and
// tombstones alone), built by a scan of the record keys and added to
// before every write of a record key is committed. Its "no" is certain,
// and the claim reads nothing; its "maybe" reads as before.
//
// Never a wrong "no": an id is added, under its record's lock, before the
// write that creates its key is committed, and the lock is held until the
// commit ends. A rebuild (at Open, in the background, and whenever the
// filter holds more ids than it was sized for) installs the new filter
// first, so that every later add reaches it too; then takes and gives back
// every record lock, so that every write whose add did not reach it has
// committed; then scans the record keys into it and puts it in place.
// Until the first build ends every read is a "maybe".
//
// A build reads every record key once, through the block cache, whose
// churn raised the gateway's RSS by about 10 MiB in the 200 000-key probe
// when the filter was built again at 65 536 and 131 072 keys: it starts
// sized for a million keys (2 MiB), so a store under a million keys is
// scanned only at Open.
//
// Deleted keys stay in the filter until the next rebuild (a "maybe" that
// reads and finds nothing), which comes once as many keys were created as
// the last build found. Bounded: knownBitsPerKey bits (rounded up to a
// power of two) for twice the ids the filter held when the build began,
// at most knownMaxBytes in all (past about 3 million keys the "maybe"s
// grow; the reads stay right).
const (
	knownBitsPerKey = 10
	knownHashes     = 7
	knownMinKeys    = 1 << 20
	knownMaxBytes   = 16 << 20
)

// keyFilter is one bloom filter of a fixed size.
type keyFilter struct {
	bits  []atomic.Uint64
	mask  uint64       // bit count - 1 (a power of two)
	keys  int64        // the ids it holds before it is built again
	added atomic.Int64 // ids added (the scan's and the writes')
}

// newKeyFilter sizes a filter for keys ids (at most knownMaxBytes; a
// build asks for at least knownMinKeys).
func newKeyFilter(keys int64) *keyFilter {
	keys = max(keys, 64)
	n := uint64(keys) * knownBitsPerKey
	n = 1 << bits.Len64(n-1) // a power of two, at least n
	n = min(n, knownMaxBytes*8)
	return &keyFilter{bits: make([]atomic.Uint64, n/64), mask: n - 1, keys: keys}
}

// probes calls f with each of h's bit positions (double hashing).
func (f *keyFilter) probes(h uint64, each func(bit uint64) bool) bool {
	a, b := h, h>>32|1
	for range knownHashes {
		if !each(a & f.mask) {
			return false
		}
		a += b
	}
	return true
}

func (f *keyFilter) add(h uint64) {
	f.probes(h, func(bit uint64) bool {
		w := &f.bits[bit/64]
		if m := uint64(1) << (bit % 64); w.Load()&m == 0 {
			w.Or(m)
		}
		return true
	})
	f.added.Add(1)
}

func (f *keyFilter) has(h uint64) bool {
	return f.probes(h, func(bit uint64) bool {
		return f.bits[bit/64].Load()&(1<<(bit%64)) != 0
	})
}

// knownKeys is the filter in use and, during a rebuild, the next one.
type knownKeys struct {
	seed     maphash.Seed
	building sync.Mutex                // one build at a time: each installs its own next
	cur      atomic.Pointer[keyFilter] // nil until the first build ends
	next     atomic.Pointer[keyFilter] // the filter being built, if any
	// builds counts the builds that ended (tests wait for the first).
	builds atomic.Int64
}

func (k *knownKeys) init(seed maphash.Seed) { k.seed = seed }

// add notes that record id's key is about to be written. Called with id's
// lock held, before the write is committed.
func (k *knownKeys) add(id string) {
	h := maphash.String(k.seed, id)
	// next before cur: an add that finds no next either came before the
	// rebuild installed one (the rebuild waits for its write to commit,
	// then scans it) or after the rebuild put it in place as cur.
	n := k.next.Load()
	c := k.cur.Load()
	if c != nil {
		c.add(h)
	}
	if n != nil && n != c {
		n.add(h)
	}
}

// may reports whether DIR may hold record id's key: false only when it
// certainly does not.
func (k *knownKeys) may(id string) bool {
	c := k.cur.Load()
	return c == nil || c.has(maphash.String(k.seed, id))
}

// full reports whether the filter holds more ids than it should before
// it is built again (false before the first build: that one is under
// way).
func (k *knownKeys) full() bool {
	c := k.cur.Load()
	return c != nil && c.added.Load() > c.keys
}

// errBuildStopped: the engine is closing, or a record stayed locked.
var errBuildStopped = errors.New("the key filter's build was stopped")

// buildKnown builds the filter anew from the record keys DIR holds (see
// knownKeys), and puts it in place; on failure the filter in use stays.
func (e *Engine) buildKnown() error {
	k := &e.known
	k.building.Lock()
	defer k.building.Unlock()
	size := int64(0)
	if c := k.cur.Load(); c != nil {
		size = 2 * c.added.Load()
	}
	next := newKeyFilter(max(size, knownMinKeys))
	k.next.Store(next)
	defer k.next.CompareAndSwap(next, nil)
	// Every write whose add missed next has taken its record's lock
	// before next was installed, and holds it until its commit ends.
	if err := e.locks.each(e.stop, e.opts.OpTimeout); err != nil {
		return err
	}
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindRecord}, UpperBound: []byte{kindRecord + 1}})
	if err != nil {
		return e.readErr(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		next.add(maphash.Bytes(k.seed, it.Key()[1:]))
		if n++; n%4096 == 0 && e.closed.Load() {
			_ = it.Close()
			return errBuildStopped
		}
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return e.readErr(err)
	}
	// Built again once as many keys were created as the scan found (the
	// deleted ones are forgotten then): sized for twice the keys it
	// found, it is never fuller than that meanwhile.
	next.keys = max(2*int64(n), knownMinKeys)
	k.cur.Store(next)
	k.builds.Add(1)
	return nil
}

// knownLoop builds the filter once the engine is open, and again whenever
// it fills (one of the engine's goroutines).
func (e *Engine) knownLoop() {
	build := func() {
		if err := e.buildKnown(); err != nil && !errors.Is(err, errBuildStopped) && !errors.Is(err, errClosed) {
			e.opts.OnError(errors.Join(errors.New("store: embedded store "+e.dir+": build the key filter"), err))
		}
	}
	build()
	e.every(sweepEvery, func() {
		if e.known.full() || e.known.cur.Load() == nil {
			build()
		}
	})
}

// each takes and gives back every stripe's lock in turn, waiting at most
// timeout for each, and fails when one stays taken or stop is closed.
func (l *recordLocks) each(stop <-chan struct{}, timeout time.Duration) error {
	var t *time.Timer
	for _, ch := range l.stripes {
		select {
		case ch <- struct{}{}:
			<-ch
			continue
		default:
		}
		if t == nil {
			t = time.NewTimer(timeout)
			defer t.Stop()
		} else {
			t.Reset(timeout)
		}
		select {
		case ch <- struct{}{}:
			<-ch
		case <-t.C:
			return errBuildStopped
		case <-stop:
			return errBuildStopped
		}
	}
	return nil
}
