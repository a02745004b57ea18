// Package embedded is the durable embedded record store: the store.Engine
// contract for a single gateway on Pebble (CockroachDB's storage engine),
// keeping its records in one directory (DIR).
//
// Exclusive: one process owns DIR, through an flock on DIR/LOCK (the
// kernel drops it when the process dies, so a kill -9 leaves no stale
// lock); DIR/LOCK holds the owner's pid, which a second Open names in its
// error.
//
// Layout: DIR/db is the Pebble database, DIR/secret the deployment secret
// (checksummed), DIR/LOCK the owner's lock. A record is one key
// (r/<id>, with its tombstone); the state indexes (i/<state>/<id>) make
// listing a range scan and the ordered expiry keys (x/<expiry>/<id>)
// make expiry one, but a completed record has no state index key (List
// walks the record keys) and a record in flight no expiry key (the sweep
// walks its state index): an execute writes one of each (keys.go).
//
// Durable: a change whose loss could execute an operation again or undo
// a decision (a claim that lets a request through, a release, a hold, an
// operator's resolution, a check's verdict) is committed with a synced
// write-ahead log entry before the call returns; Pebble commits
// concurrent writers with one fsync (group commit). A stored result is
// applied (visible to the next call) and written to the log file (in
// the OS's hands: a kill -9 loses nothing) before Complete returns, and
// synced by the next synced write or by the background sync, at most
// Options.SyncInterval later: a machine crash can only turn a result of
// that last window back into its claim, whose lease runs out (see
// walsync.go). Changes nobody acts on (a replay's attempt count, a
// renewed lease) are written without waiting for the log (committed
// without a sync), and without waiting at all while a commit could be
// held up (inline.go).
//
// Atomic: every read-modify-write of a record runs under that record's
// lock (one of a fixed set of striped locks), so claims on different
// records never wait for each other.
//
// Bounded: records live on disk; memory is Pebble's block cache and
// memtables (Options.CacheSize, Options.MemTableSize), and the records in
// flight this process claimed, kept for their completion up to a fixed
// bound (hot.go), whatever DIR holds.
// Expired records are deleted by a sweep of the expiry keys (a record
// whose tombstone lives on is turned into it, under the same key: see
// retention.go), and Pebble's compactions give their space back.
//
// Damage is loud: Pebble checksums its log, tables and manifest and
// refuses to open on damage that is not a torn last write; Open reads the
// manifest whole and the newest log's end at every start and refuses
// damage Pebble would take for a torn write; a clean Close leaves a
// marker naming its last write, and Open refuses when that write is
// missing. The one case a single log cannot tell from a torn write, an
// unreadable last entry of the newest log after a crash, is dropped and
// reported (Recovery.Dropped). See Check.
//
// Disk full: a write that meets ENOSPC fails the calls waiting for it
// (nothing is forwarded on a failed claim) and every later write fails at
// once until the filesystem has room again; then Pebble's write is
// retried and the store goes on without a restart (see diskfull.go).
package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/idemgate/idemgate/store"
)

// Defaults.
const (
	// DefaultOpTimeout bounds the wait for a record's lock and its write.
	DefaultOpTimeout = 2 * time.Second
	// DefaultCacheSize is Pebble's block cache.
	DefaultCacheSize = 16 << 20
	// DefaultMemTableSize is the size of one Pebble memtable (at most
	// two are kept before writes wait for a flush).
	DefaultMemTableSize = 4 << 20
	// DefaultMinFreeSpace is the free space the filesystem needs before a
	// store stopped by a full disk writes again.
	DefaultMinFreeSpace = 4 << 20
	// sweepEvery is how often expired records are deleted (reads treat
	// them as gone from the millisecond they expire).
	sweepEvery = time.Second
)

// Options configure Open.
type Options struct {
	// Dir is the directory the engine owns; it is created (0700) when
	// missing.
	Dir string
	// OpTimeout bounds how long a call waits for a record's lock and
	// its write; default 2s.
	OpTimeout time.Duration
	// CacheSize is Pebble's block cache in bytes; default
	// DefaultCacheSize.
	CacheSize int64
	// MemTableSize is Pebble's memtable size in bytes; default
	// DefaultMemTableSize.
	MemTableSize int64
	// MinFreeSpace is how much free space the filesystem must have
	// before a store stopped by a full disk writes again; default
	// DefaultMinFreeSpace.
	MinFreeSpace int64
	// SyncInterval is the longest a stored result waits for the fsync
	// that makes it survive a machine crash (the next synced write, or
	// a background sync this often when there was none); default
	// DefaultSyncInterval. It is written to the log file, and so
	// survives a process crash, before Complete returns.
	SyncInterval time.Duration
	// OnError, when set, is told of failures no call returns (a full
	// disk and its end, a failed sweep, Pebble's background errors). It
	// is called from the engine's own goroutines.
	OnError func(error)

	// fs is the file system the database lives on (tests: a file
	// system that loses what was not synced); nil: the disk.
	fs vfs.FS
	// room is the free space beyond MinFreeSpace that writes committed
	// in their callers need (tests: a small file system); 0: inlineRoom.
	room int64
}

// Recovery is what Open found in DIR.
type Recovery struct {
	// Imported is how many live records were imported from a journal
	// written by an earlier version (once: see migrate.go).
	Imported int
	Took     time.Duration
	// Dropped says, one line each, what Pebble drops as a write a crash
	// cut short: the last entry of the newest log or the last record of
	// the manifest, when it cannot be read (see checkLogTail,
	// checkManifest). Open logs
	// each as a warning.
	Dropped []string
}

// Engine is an open embedded store. It is safe for concurrent use.
type Engine struct {
	dir  string
	lock *dirLock
	opts Options
	db   *pebble.DB

	locks  recordLocks
	hot    hotSlots    // records in flight this process claimed (hot.go)
	recent *recentKeys // record keys written recently (recent.go)
	known  knownKeys   // which record keys DIR may hold (known.go)
	full   diskFull
	gate   inlineGate // whether a write may be committed in its caller (inline.go)
	wal    walSync    // which syncs of the log reach the disk

	// life is held shared by every call using db, and exclusively by
	// Close; closed is set first.
	life   sync.RWMutex
	closed atomic.Bool
	damage atomic.Pointer[error] // set when Pebble found a damaged file

	clock atomic.Int64 // last time handed out, ms: never goes back
	swept atomic.Int64 // bytes of records expired since the last compaction

	stop chan struct{}
	done sync.WaitGroup // sweeper and syncer

	secretMu sync.Mutex
	secret   []byte

	notices store.LocalNotices // completions, releases and holds, to this process's waiters

	recovered Recovery
	closeOnce sync.Once
	closeErr  error
}

var _ store.Engine = (*Engine)(nil)

// errClosed is returned by every call after Close.
var errClosed = errors.New("store: embedded store is closed")

// rec is a record as kept: the contract's Record plus its expiry and
// verification state, with the rules both Go engines share.
type rec = store.Stored

// Open opens (creating when missing) and recovers the store in
// opts.Dir, and takes it for this process: it fails, naming DIR and the
// owner's pid, when another process has it, and naming the file when DIR
// is damaged.
func Open(opts Options) (*Engine, error) {
	began := time.Now()
	if opts.Dir == "" {
		return nil, errors.New("store: embedded store: no directory")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("store: embedded store: %w", err)
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.MemTableSize <= 0 {
		opts.MemTableSize = DefaultMemTableSize
	}
	if opts.MinFreeSpace <= 0 {
		opts.MinFreeSpace = DefaultMinFreeSpace
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = DefaultSyncInterval
	}
	if opts.room <= 0 {
		opts.room = inlineRoom
	}
	if opts.OnError == nil {
		opts.OnError = func(error) {}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: embedded store: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	e := &Engine{dir: dir, lock: lock, opts: opts, stop: make(chan struct{})}
	e.locks.init()
	e.hot.init(e.locks.seed)
	e.recent = &recentKeys{}
	e.recent.init(e.locks.seed)
	e.known.init(e.locks.seed)
	e.full.init(e)
	if err := e.open(); err != nil {
		_ = lock.unlock()
		return nil, err
	}
	e.recovered.Took = time.Since(began)
	e.lookForRoom()
	e.done.Add(3)
	go e.sweepLoop()
	go e.syncLoop()
	go e.knownLoop()
	return e, nil
}

// open checks the manifest, the newest log's end and the clean marker,
// opens Pebble, imports an old journal and checks the secret.
func (e *Engine) open() error {
	nonce, err := readClean(e.dir)
	if err != nil {
		return err
	}
	for _, check := range []func() (string, error){
		func() (string, error) { return checkManifest(e.dir, nonce != nil) },
		func() (string, error) { return checkLogTail(e.dir) },
	} {
		dropped, err := check()
		if err != nil {
			return err
		}
		if dropped != "" {
			e.recovered.Dropped = append(e.recovered.Dropped, dropped)
		}
	}
	if err := e.checkClean(nonce); err != nil {
		return err
	}
	cache := pebble.NewCache(e.opts.CacheSize)
	db, err := pebble.Open(filepath.Join(e.dir, dbDir), e.pebbleOptions(cache, false))
	cache.Unref()
	if err != nil {
		return damaged(e.dir, err)
	}
	e.db = db
	fail := func(err error) error {
		_ = db.Close()
		return err
	}
	n, err := e.migrate()
	if err != nil {
		return fail(err)
	}
	e.recovered.Imported = n
	if err := e.dropCompletedIndex(); err != nil {
		return fail(err)
	}
	if err := e.openSecret(); err != nil {
		return fail(err)
	}
	return nil
}

// Dir is the directory the engine owns.
func (e *Engine) Dir() string { return e.dir }

// Recovered says what Open found in DIR.
func (e *Engine) Recovered() Recovery { return e.recovered }

// Close waits for the calls under way, writes the clean marker, stops
// the engine and gives DIR up.
func (e *Engine) Close() error {
	return e.shut(func() error {
		// On a full disk neither the flush nor the marker can be
		// written: the next Open replays the log as after a crash.
		err := e.full.check()
		if err == nil {
			err = e.db.Flush() // the next Open replays no log
		}
		if err == nil {
			err = e.markClean()
		}
		if cerr := e.db.Close(); err == nil {
			err = cerr
		}
		if uerr := e.lock.unlock(); err == nil {
			err = uerr
		}
		return err
	})
}

// shut stops the engine's goroutines and, once the calls under way are
// done, runs last (once: later calls return its error).
func (e *Engine) shut(last func() error) error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		close(e.stop)
		e.done.Wait()
		e.life.Lock()
		defer e.life.Unlock()
		e.closeErr = last()
	})
	return e.closeErr
}

// enter starts a call that uses the database; leave ends it.
func (e *Engine) enter() error {
	if e.closed.Load() {
		return errClosed
	}
	e.life.RLock()
	if e.closed.Load() {
		e.life.RUnlock()
		return errClosed
	}
	if err := e.damage.Load(); err != nil {
		e.life.RUnlock()
		return *err
	}
	return nil
}

func (e *Engine) leave() { e.life.RUnlock() }

// now is the engine's clock in ms: the wall clock, never going back.
func (e *Engine) now() int64 {
	for {
		last := e.clock.Load()
		n := time.Now().UnixMilli()
		if n <= last {
			return last
		}
		if e.clock.CompareAndSwap(last, n) {
			return n
		}
	}
}

// Now is the engine's clock, by which leases and TTLs run out.
func (e *Engine) Now() time.Time { return time.UnixMilli(e.now()) }

// ExpiresAt is when record id expires; the zero time when there is no
// such record.
func (e *Engine) ExpiresAt(id string) time.Time {
	if err := e.enter(); err != nil {
		return time.Time{}
	}
	defer e.leave()
	r, err := e.read(id)
	if err != nil || r == nil || r.ExpireAt <= e.now() {
		return time.Time{}
	}
	return time.UnixMilli(r.ExpireAt)
}

// durability is how far a write gets before the call returns.
type durability uint8

const (
	// unwaited: not waited for (an attempt count, a renewed lease).
	unwaited durability = iota
	// applied: visible and written to the log file (a process crash
	// keeps it), synced within SyncInterval (a stored result).
	applied
	// synced: on disk (a claim, a release, a hold, a decision).
	synced
)

// mutation is what a change function returns: the new record (nil:
// nothing to write), how far the write must get before the call
// returns, and whether a write that is abandoned (its wait timed out)
// must be undone when it lands (a claim nobody was told about).
type mutation struct {
	next  *rec
	dur   durability
	undo  bool
	count bool // only next's attempt count changed
	err   error
	ret   retention // the tombstone and twin entry written with next
}

// update runs f on record id (nil when it does not exist or expired)
// under the record's lock and commits what it returns. It returns the
// record as left and f's result.
func (e *Engine) update(ctx context.Context, op, id string, f func(cur *rec, now int64) mutation) (*rec, mutation, error) {
	return e.updateSlot(ctx, op, id, func(cur *rec, _ tomb, now int64) mutation { return f(cur, now) })
}

// updateSlot is update for a change that reads the tombstone the record
// key holds too (past: live or not, until 0 when none).
func (e *Engine) updateSlot(ctx context.Context, op, id string, f func(cur *rec, past tomb, now int64) mutation) (*rec, mutation, error) {
	if err := e.enter(); err != nil {
		return nil, mutation{}, err
	}
	held, err := e.locks.take(ctx, id, e.opts.OpTimeout)
	if err != nil {
		e.leave()
		if full := e.full.check(); full != nil && errors.Is(err, errLockTimeout) {
			// The write that holds the record waits for room (a renewal
			// Pebble retries once the disk has space): this one is
			// refused for want of room too, so a result is kept.
			err = full
		}
		return nil, mutation{}, fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	release := func() { <-held; e.leave() }
	s, err := e.slotOf(id)
	if err != nil {
		release()
		return nil, mutation{}, fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	now := e.now()
	raw, cur := s.rec, s.rec
	if cur != nil && cur.ExpireAt <= now {
		cur = nil
	}
	m := f(cur, s.tomb, now)
	if m.next == nil || m.err != nil {
		release()
		return cur, m, nil
	}
	if m.dur == unwaited && e.full.is() {
		// A change nobody waits for is skipped while the disk is full.
		release()
		return m.next, m, nil
	}
	if err := e.full.check(); err != nil {
		release()
		return nil, mutation{}, fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	w := &write{e: e, b: e.db.NewBatch(), id: id, held: held, prev: s, undo: m.undo,
		wrote: slot{rec: m.next, tomb: s.tomb, attempts: true}}
	b := w.b
	switch {
	case m.count:
		err = putAttempts(b, m.next)
	case raw == nil && s.tomb.until != 0:
		// The key held a tombstone alone: its expiry key goes.
		err = b.SingleDelete(expiryKey(s.tomb.until, id), nil)
	}
	if err == nil && !m.count {
		// The tombstone travels in the record's value: no key of its own.
		w.wrote = slot{rec: m.next, tomb: m.ret.tombAfter(m.next, s.tomb, now)}
		err = writeRecord(b, raw, m.next, w.wrote.tomb, s.attempts)
	}
	if err == nil && !m.count {
		err = e.retain(b, m.next, m.ret)
	}
	if err != nil {
		_ = b.Close()
		release()
		return nil, mutation{}, fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	e.recent.mark(id)
	if s.rec == nil && s.tomb.until == 0 {
		e.known.add(id) // the write creates the key
	}
	if err := e.commit(ctx, w, m.dur); err != nil {
		return nil, mutation{}, fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	return m.next, m, nil
}

// write is one change of a record being committed, with the record's
// lock held (one allocation for all it needs).
type write struct {
	e     *Engine
	b     *pebble.Batch
	id    string
	held  chan struct{} // the record's lock
	wrote slot          // what the record key holds once b lands
	prev  slot          // what it held before: an undo puts it back
	undo  bool          // undo the write if it lands after its caller stopped waiting

	state atomic.Int32
	done  chan error
}

// States of a waited write.
const (
	waiting int32 = iota
	finished
	abandoned
)

// release ends the write: the in-memory record follows what b left on
// disk (err nil: it landed), and the record's lock is given back.
func (w *write) release(err error) {
	w.e.hot.landed(w.id, w.wrote, err)
	<-w.held
	w.e.leave()
}

// errAbandoned is what release hears of a write whose caller stopped
// waiting for it.
var errAbandoned = errors.New("the write was abandoned")

// unwaited commits a write nobody waits for.
func (w *write) unwaited() {
	err := w.b.Commit(pebble.NoSync)
	if err != nil {
		w.e.opts.OnError(fmt.Errorf("store: embedded store %s: %w", w.e.dir, err))
	}
	_ = w.b.Close()
	w.release(err)
}

// commitWaited commits a write its caller waits for (durable: on disk;
// else applied), and hands the result to the caller, or, when the caller
// stopped waiting, undoes a write that must be undone.
func (w *write) commitWaited(durable bool) {
	// pebble.Sync makes the log writer write the entry to the file
	// before the sync; walSync decides whether and when the sync
	// reaches the disk, and end waits for it when it must.
	end := w.e.wal.begin(durable)
	err := end(w.b.Commit(pebble.Sync))
	_ = w.b.Close()
	if w.state.CompareAndSwap(waiting, finished) {
		w.release(err)
		w.done <- err
		return
	}
	if err == nil && w.undo {
		w.e.undo(w.id, w.prev, w.wrote.rec)
	}
	w.release(errAbandoned)
}

func (w *write) commitDurable() { w.commitWaited(true) }

func (w *write) commitApplied() { w.commitWaited(false) }

// timers are reused by commit's waits (a timer per write otherwise).
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// commit commits w and releases it once it is done: in the caller when
// nothing can hold the commit up (inline.go), else in a goroutine of its
// own, waiting at most OpTimeout (or until ctx ends) for it; a commit
// that lands after that is undone (when w says so) before its release.
func (e *Engine) commit(ctx context.Context, w *write, dur durability) error {
	switch {
	case dur == unwaited && e.inline():
		// Nobody acts on it (an attempt count, a renewal): committed
		// without a sync, so a replay never waits for the disk.
		w.unwaited()
		return nil
	case dur == unwaited:
		// The commit might wait for the disk: not waited for. The
		// record stays locked until it is committed.
		go w.unwaited()
		return nil
	case e.inline():
		return e.commitInline(ctx, w, dur)
	case dur == synced:
		w.done = make(chan error, 1)
		go w.commitDurable()
	default:
		w.done = make(chan error, 1)
		go w.commitApplied()
	}
	t := timers.Get().(*time.Timer)
	t.Reset(e.opts.OpTimeout)
	defer func() {
		t.Stop()
		timers.Put(t)
	}()
	var why error
	select {
	case err := <-w.done:
		return e.writeErr(err)
	case <-t.C:
		why = fmt.Errorf("the write took longer than %s", e.opts.OpTimeout)
	case <-ctx.Done():
		why = ctx.Err()
	}
	if !w.state.CompareAndSwap(waiting, abandoned) {
		return e.writeErr(<-w.done)
	}
	if err := e.full.check(); err != nil {
		return err
	}
	return why
}

// writeErr names DIR in a failed write.
func (e *Engine) writeErr(err error) error {
	if err == nil {
		return nil
	}
	return e.readErr(err)
}

// undo puts back what record id's key held (prev: a record, a
// tombstone alone, or nothing) after a claim's write landed that nobody
// was told about, unless the record changed since. Called with the
// record's lock held.
func (e *Engine) undo(id string, prev slot, wrote *rec) {
	defer e.hot.drop(id)
	cur, err := e.read(id)
	if err != nil || cur == nil || cur.Token != wrote.Token || cur.State != wrote.State {
		return
	}
	b := e.db.NewBatch()
	defer b.Close()
	switch {
	case prev.rec != nil:
		err = putRecord(b, cur, prev.rec, prev.tomb)
	case prev.tomb.until != 0:
		err = buryRecord(b, cur, prev.tomb)
	default:
		err = deleteRecord(b, cur)
	}
	if err == nil {
		end := e.wal.begin(true)
		err = end(b.Commit(pebble.Sync))
	}
	if err != nil {
		e.opts.OnError(fmt.Errorf("store: embedded store %s: undo the claim of %s that timed out: %w", e.dir, id, err))
	}
}

// Claim takes the right to execute an operation, or returns its record
// (see store.Engine.Claim for the rules, which are the same).
func (e *Engine) Claim(ctx context.Context, req store.ClaimRequest) (store.ClaimResult, error) {
	a, err := store.ValidateClaim(req)
	if err != nil {
		return store.ClaimResult{}, err
	}
	var res store.ClaimResult
	out, m, err := e.updateSlot(ctx, "claim", req.ID, func(cur *rec, past tomb, now int64) mutation {
		res = store.ClaimResult{Now: time.UnixMilli(now)}
		var found *store.Tombstone
		var twin *store.Twin
		if cur == nil {
			// The record key's read found the tombstone too, if any.
			if a.Tombstones && past.until > now {
				found = past.view(req.ID)
			}
			var err error
			if twin, err = e.twinOf(req.Twin, now); err != nil {
				return mutation{err: err}
			}
		}
		next, w := cur.Claim(now, req, a, found, twin, &res)
		switch w {
		case store.WriteClaimed:
			return mutation{next: next, dur: synced, undo: true}
		case store.WriteHeld:
			return mutation{next: next, dur: synced}
		case store.WriteCounted:
			return mutation{next: next, count: true} // only counted: no fsync to wait for
		}
		return mutation{}
	})
	if err == nil {
		err = m.err
	}
	if err != nil {
		return store.ClaimResult{}, err
	}
	if out == nil {
		return res, nil // nothing created: a tombstone or a twin refused it
	}
	res.Record = out.View()
	if res.Claimed {
		res.Claim = store.NewClaim(e, req, res.Record.StartedAt, req.TTL)
	}
	return res, nil
}

// Renew extends a live claim's lease to now+lease.
func (e *Engine) Renew(ctx context.Context, id, token string, lease time.Duration) (bool, error) {
	lease, err := store.CheckRenew(id, lease)
	if err != nil {
		return false, err
	}
	return e.change(ctx, "renew", id, unwaited, func(cur *rec, now int64) *rec {
		if cur == nil || cur.State != store.StateInFlight || cur.Token != token {
			return nil
		}
		r := cur.Clone()
		r.LeaseUntil = time.UnixMilli(now + store.Millis(lease))
		return r
	})
}

// Complete stores a result under its claim (see store.CompleteRequest),
// also writing the record anew when it does not exist.
func (e *Engine) Complete(ctx context.Context, req store.CompleteRequest) (bool, error) {
	id := req.Claim.ID
	result, ttl, err := store.CheckComplete(req)
	if err != nil {
		return false, err
	}
	// Applied, not synced: a machine crash within SyncInterval brings
	// the claim back (synced before the request was forwarded), whose
	// lease runs out into outcome unknown or a check: never a missing
	// record a retry would execute again.
	changed := false
	_, _, err = e.update(ctx, "complete", id, func(cur *rec, now int64) mutation {
		r := cur.Complete(now, req, result, ttl)
		if r == nil {
			return mutation{} // the token was taken over
		}
		changed = true
		// The tombstone goes in the record's value, the twin entry in
		// the completion's own batch: no write of their own.
		return mutation{next: r, dur: applied, ret: completion(req, now)}
	})
	return e.settled(id)(changed && err == nil, err)
}

// Release marks the record released: the next claim executes again.
func (e *Engine) Release(ctx context.Context, id, token string, ttl time.Duration) (bool, error) {
	ttl, err := store.CheckRelease(id, ttl)
	if err != nil {
		return false, err
	}
	return e.settled(id)(e.change(ctx, "release", id, synced, func(cur *rec, now int64) *rec {
		return cur.Release(now, token, ttl)
	}))
}

// MarkUnknown holds the record as outcome unknown; a completed record is
// never demoted.
func (e *Engine) MarkUnknown(ctx context.Context, id, token, reason string, holdTTL time.Duration) (bool, error) {
	reason, holdTTL, err := store.CheckMarkUnknown(id, reason, holdTTL)
	if err != nil {
		return false, err
	}
	return e.settled(id)(e.change(ctx, "mark unknown", id, synced, func(cur *rec, now int64) *rec {
		return cur.MarkUnknown(now, token, reason, holdTTL)
	}))
}

// change runs one fenced state change: f returns the new record, or nil
// to leave it alone (false). It returns once the change got as far as
// dur says.
func (e *Engine) change(ctx context.Context, op, id string, dur durability, f func(cur *rec, now int64) *rec) (bool, error) {
	changed := false
	_, _, err := e.update(ctx, op, id, func(cur *rec, now int64) mutation {
		r := f(cur, now)
		changed = r != nil
		return mutation{next: r, dur: dur}
	})
	return changed && err == nil, err
}

// Get reads one record; nil, nil when it does not exist.
func (e *Engine) Get(ctx context.Context, id string) (*store.Record, error) {
	if !store.ValidID(id) {
		return nil, store.ErrInvalidID
	}
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	// The record's lock, taken and given back, waits for a change
	// still being written (an attempt count or a renewal is not waited
	// for by its caller), so a Get sees every change made before it.
	unlock, err := e.locks.lock(ctx, id, e.opts.OpTimeout)
	if err != nil {
		return nil, fmt.Errorf("store: get %s: %w", id, err)
	}
	unlock()
	r, err := e.read(id)
	if err != nil {
		return nil, fmt.Errorf("store: get %s: %w", id, err)
	}
	if r == nil || r.ExpireAt <= e.now() {
		return nil, nil
	}
	return r.View(), nil
}

// OperatorRelease releases a record on an operator's word (see
// store.Engine.OperatorRelease) and appends act to its audit trail.
func (e *Engine) OperatorRelease(ctx context.Context, id string, act store.Action, ttl time.Duration) (*store.Record, error) {
	ttl, err := store.CheckOperatorRelease(ttl)
	if err != nil {
		return nil, err
	}
	return e.operator(ctx, "release", id, act, retention{dropTomb: true}, func(cur *rec, now int64) (*rec, error) {
		return cur.OperatorRelease(now, ttl)
	})
}

// OperatorComplete records a verified outcome on an operator's word (see
// store.Engine.OperatorComplete) and appends act to its audit trail.
func (e *Engine) OperatorComplete(ctx context.Context, id string, res store.Result, act store.Action, ttl time.Duration) (*store.Record, error) {
	res, ttl, err := store.OperatorCompletion(res, ttl)
	if err != nil {
		return nil, err
	}
	result := store.KeptResult(res)
	return e.operator(ctx, "complete", id, act, retention{tomb: store.Millis(store.DefaultTombstone)}, func(cur *rec, now int64) (*rec, error) {
		return cur.OperatorComplete(now, result, ttl)
	})
}

// operator runs an operator's change on an existing record: f returns the
// new record or the conflict; the audit entry is added in the same step.
func (e *Engine) operator(ctx context.Context, action, id string, act store.Action, ret retention, f func(cur *rec, now int64) (*rec, error)) (*store.Record, error) {
	if err := store.CheckOperator(id, act); err != nil {
		return nil, err
	}
	return e.audited(ctx, action, id, act, ret, f)
}

// audited runs f on an existing record under its lock and appends act to
// the audit trail of the record it returns, in the same write.
func (e *Engine) audited(ctx context.Context, action, id string, act store.Action, ret retention, f func(cur *rec, now int64) (*rec, error)) (*store.Record, error) {
	out, m, err := e.update(ctx, "operator "+action, id, func(cur *rec, now int64) mutation {
		if cur == nil {
			return mutation{err: fmt.Errorf("%w: %s", store.ErrNotFound, id)}
		}
		r, err := f(cur, now)
		if err != nil {
			return mutation{err: err}
		}
		r.AddAudit(now, act.Actor, action, act.Reason)
		return mutation{next: r, dur: synced, ret: ret}
	})
	switch {
	case err != nil:
		return nil, err
	case m.err != nil && out == nil:
		return nil, m.err
	case m.err != nil:
		return out.View(), m.err
	}
	return out.View(), nil
}
