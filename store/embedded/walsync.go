package embedded

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// DefaultSyncInterval is the longest a completion stays unsynced: the
// background sync's period.
const DefaultSyncInterval = 100 * time.Millisecond

// One synced write per execute. A claim must be on disk before its
// request is forwarded; a completion must only be applied (visible to the
// next request) and handed to the OS (so that a kill -9 loses nothing
// acknowledged) before its answer is written. Pebble offers "synced" and
// "in the log writer's memory": a NoSync commit returns with its log
// entry still in the log writer's buffer, which the log writer writes to
// the file only when a sync is asked for or a 32 KiB block fills, so a
// process that dies then loses it. So every write that is waited for is
// committed with pebble.Sync, which makes Pebble's log writer write the
// entry to the file and then call the file's sync, and walFS decides
// what that sync does:
//
//   - while a write that must be durable is under way (a claim, a
//     release, a hold, an operator's decision, a check's verdict, an
//     undo: it holds walSync.durable), the sync returns at once, and the
//     durable write, once Pebble returns, waits for an fdatasync that
//     covers what the log file held then (waitDurable): the first
//     waiter runs it, the ones that come while it runs share the next
//     (group commit). Pebble's log writer is one goroutine that writes
//     and then syncs; left to it, every write queued behind an fsync (a
//     completion too) would wait for that fsync to end;
//   - when durable writes come together (more than one began between
//     the last two fdatasyncs' starts, or since the last one's), the
//     waiter that is to run the fdatasync first yields its processor
//     once (runtime.Gosched, in syncTo), and the durable writes that
//     come meanwhile share that fdatasync. When requests fill the
//     CPUs, the goroutines ready to run go first: the log writer with
//     entries in its buffer, durable writers Pebble has just woken,
//     requests about to commit a claim; their entries land and the one
//     fdatasync covers them. In the gateway at 64 connections that made
//     0.06-0.08 fsyncs per claim instead of 0.11-0.28, for a yield of
//     1-3 ms (the yielded goroutine waits its turn in the scheduler's
//     global queue) where a request took 20 ms. At 2 connections writes
//     seldom come together: 1-4% of the fdatasyncs yield, for 1-12 µs
//     on average. The yield changes only when the fdatasync starts,
//     never what it covers;
//   - while only completions are under way (walSync.applied), the sync
//     stops at the file: Pebble wrote the entry before calling it. The
//     next durable write's fdatasync covers it (the log is sequential),
//     or syncLoop's background sync, at most SyncInterval later;
//   - any other sync (Pebble's own at open and close, a write nobody
//     counts) is a real fdatasync before it returns. Every synced write
//     the engine makes while it serves calls is counted (begin).
//
// A log file is synced for real before Pebble closes it, so a log with
// unsynced completions is never left behind.
//
// Pebble's log chunks carry the offset the log was synced up to when
// they were written, and a replay that finds an unreadable chunk below
// the synced offset a later chunk names takes it for damage and refuses
// to open; a chunk past it is a write a crash cut short. Pebble takes a
// sync that returned for a sync done, so walFile.Write lowers the offset
// in every chunk to what an fdatasync really covered: after a power cut
// that wrote some unsynced pages and not others, the replay ends at the
// first missing one instead of refusing a sound database.
type walSync struct {
	durable atomic.Int64 // commits under way that must be on disk when they return
	applied atomic.Int64 // completions under way

	// Counts: durable writes begun (syncTo tells from it whether they
	// come together), and fdatasyncs of a log file (tests, benchmarks).
	durables, fsyncs atomic.Int64

	mu    sync.Mutex
	cond  *sync.Cond            // on mu: a sync ended, or a yield before one
	files map[*walFile]struct{} // the open log files
	// On mu: yielding is set while the waiter that is to run a durable
	// write's fdatasync yields before it (syncTo); syncBegan is
	// durables when the last fdatasync started, lastGroup how many
	// durable writes began between the last two starts.
	yielding  bool
	syncBegan int64
	lastGroup int64
}

// init readies w (once, before the database opens).
func (w *walSync) init() {
	if w.cond == nil {
		w.cond = sync.NewCond(&w.mu)
	}
}

// begin counts a commit under way (durable or only applied) and returns
// its end, which a durable commit's caller gets its result from: the
// commit's error, or once it is on disk nil.
func (w *walSync) begin(durable bool) func(error) error {
	if !durable {
		w.applied.Add(1)
		return func(err error) error {
			w.applied.Add(-1)
			return err
		}
	}
	w.durable.Add(1)
	w.durables.Add(1)
	return func(err error) error {
		if err == nil {
			err = w.waitDurable()
		}
		w.durable.Add(-1)
		return err
	}
}

// syncMode is what a sync of the log file does now.
type syncMode uint8

const (
	syncNow      syncMode = iota // fdatasync before returning
	syncDeferred                 // the durable writes run it (waitDurable)
	syncLater                    // only completions: the next sync covers it
)

func (w *walSync) mode() syncMode {
	switch {
	case w.durable.Load() > 0:
		return syncDeferred
	case w.applied.Load() > 0:
		return syncLater
	}
	return syncNow
}

// waitDurable waits until every log file is synced up to what it held
// when called (everything a commit that returned before wrote), or fails
// with the sync's error.
func (w *walSync) waitDurable() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	type target struct {
		f   *walFile
		off int64
	}
	var targets [2]target
	ts := targets[:0]
	for f := range w.files {
		if off := f.written.Load(); off > f.synced {
			ts = append(ts, target{f, off})
		}
	}
	for _, t := range ts {
		if err := t.f.syncTo(t.off, true); err != nil {
			return err
		}
	}
	return nil
}

// syncAll syncs every open log file written since its last sync.
func (w *walSync) syncAll() error {
	w.mu.Lock()
	files := make([]*walFile, 0, len(w.files))
	for f := range w.files {
		if f.written.Load() > f.synced {
			files = append(files, f)
		}
	}
	w.mu.Unlock()
	var first error
	for _, f := range files {
		if err := f.syncNow(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// walFS is the database's file system with the log files wrapped (see
// walSync); every other file is the inner file system's.
type walFS struct {
	vfs.FS
	w *walSync
}

// isLog reports whether name is one of Pebble's write-ahead log files.
func isLog(name string) bool { return strings.HasSuffix(name, ".log") }

func (fs walFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !isLog(name) {
		return f, err
	}
	wf := &walFile{File: f, w: fs.w}
	fs.w.mu.Lock()
	if fs.w.files == nil {
		fs.w.files = map[*walFile]struct{}{}
	}
	fs.w.files[wf] = struct{}{}
	fs.w.mu.Unlock()
	return wf, nil
}

// Create wraps a new log file.
func (fs walFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

// ReuseForWrite wraps a recycled log file.
func (fs walFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f, err)
}

// walFile is one log file being written (by Pebble's log writer, one
// goroutine).
type walFile struct {
	vfs.File
	w        *walSync
	written  atomic.Int64 // bytes written through this handle
	durableA atomic.Int64 // synced, for Write

	// On w.mu: synced is how much of written an fdatasync covered;
	// syncing is set while one runs; closed is set once Close synced
	// and closed the file; err is the first failed sync's.
	synced  int64
	syncing bool
	closed  bool
	err     error
}

// Write writes whole chunks of the log writer's block (see walSync on
// their synced offsets) and counts the bytes once they are written (a
// sync that began before then does not cover them).
func (f *walFile) Write(p []byte) (int, error) {
	capSyncedOffsets(p, f.written.Load(), uint64(f.durableA.Load()))
	n, err := f.File.Write(p)
	f.written.Add(int64(n))
	return n, err
}

// Sync is the log writer's sync (see walSync).
func (f *walFile) Sync() error { return f.SyncData() }

// SyncData is what Pebble's syncing file calls for Sync.
func (f *walFile) SyncData() error {
	if f.w.mode() != syncNow {
		return nil
	}
	return f.syncNow()
}

// syncNow fdatasyncs everything written to the file so far.
func (f *walFile) syncNow() error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	return f.syncTo(f.written.Load(), false)
}

// syncTo returns once an fdatasync covered the file's first off bytes (or
// Close did): it runs one when none is running, else waits for the one
// running and then runs one if that did not cover off. For a durable
// write (durable), when durable writes come together, the waiter that
// is to run one yields its processor once first, and the durable writes
// that come meanwhile wait for its fdatasync (see walSync); a sync that
// is not a durable write's (Close, the background sync, Pebble's own)
// neither yields nor waits for a yield. A failed sync fails every
// durable write waiting for the file from then on: nothing is forwarded
// on a log that cannot be synced. Called with w.mu held.
func (f *walFile) syncTo(off int64, durable bool) error {
	w := f.w
	yielded := false // this call yielded, with w.yielding set, and runs the sync
	for {
		switch {
		case f.err != nil:
			return w.endYield(yielded, f.err)
		case f.closed || f.synced >= off:
			// Another sync covered off meanwhile (Close's, the
			// background sync's).
			return w.endYield(yielded, nil)
		case f.syncing, durable && w.yielding && !yielded:
			w.cond.Wait()
			continue
		case durable && !yielded && (w.lastGroup > 1 || w.durables.Load()-w.syncBegan > 1):
			// Durable writes come together (see walSync).
			yielded = true
			w.yielding = true
			w.mu.Unlock()
			runtime.Gosched()
			w.mu.Lock()
			continue
		}
		if yielded {
			// The writes that waited for the yield wait for this sync:
			// it covers them (they were written before it starts).
			w.yielding, yielded = false, false
		}
		f.syncing = true
		upTo := f.written.Load() // everything written before the fdatasync starts
		n := w.durables.Load()
		w.lastGroup, w.syncBegan = n-w.syncBegan, n
		w.mu.Unlock()
		w.fsyncs.Add(1)
		err := f.File.SyncData()
		w.mu.Lock()
		f.syncing = false
		if err != nil {
			f.err = err
		} else if upTo > f.synced {
			f.synced = upTo
			f.durableA.Store(upTo)
		}
		f.w.cond.Broadcast()
	}
}

// endYield ends a yield that led to no sync (another one covered the
// write meanwhile, or failed): the writes that waited for it look again.
// It returns err. Called with w.mu held.
func (w *walSync) endYield(yielded bool, err error) error {
	if yielded {
		w.yielding = false
		w.cond.Broadcast()
	}
	return err
}

// Close syncs what is not synced yet and closes the file.
func (f *walFile) Close() error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	err := f.syncTo(f.written.Load(), false)
	f.syncing = true // no sync starts on a closed file
	f.w.mu.Unlock()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	f.w.mu.Lock()
	f.syncing = false
	delete(f.w.files, f)
	if err != nil && f.err == nil {
		f.err = err
	}
	f.closed = true
	f.w.cond.Broadcast()
	return err
}

// syncLoop makes completions durable at most SyncInterval after they
// were written, when no durable write's fdatasync did it first.
func (e *Engine) syncLoop() {
	e.every(e.opts.SyncInterval, func() {
		e.lookForRoom()
		if err := e.wal.syncAll(); err != nil {
			e.opts.OnError(fmt.Errorf("store: embedded store %s: sync the log: %w", e.dir, err))
		}
	})
}

// every runs f every d until the engine stops (one of its goroutines).
func (e *Engine) every(d time.Duration, f func()) {
	defer e.done.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			f()
		}
	}
}

// capSyncedOffsets lowers the synced offset of every WAL-sync chunk in p,
// the bytes of a log file from offset base on, to at most synced, and
// fixes the chunk's checksum. p holds whole chunks and a block's zeroed
// end (the log writer writes from a chunk's start to a chunk's end or the
// block's end); it stops at anything else.
func capSyncedOffsets(p []byte, base int64, synced uint64) {
	for off := 0; off < len(p); {
		if rest := walBlock - int((base+int64(off))%walBlock); rest < walSyncHeader {
			off += rest // the block's zeroed end
			continue
		}
		if off+walSyncHeader > len(p) || walHeaderSize(p[off+6]) != walSyncHeader {
			return
		}
		end := off + walSyncHeader + int(binary.LittleEndian.Uint16(p[off+4:]))
		if end > len(p) {
			return
		}
		if binary.LittleEndian.Uint64(p[off+11:]) > synced {
			binary.LittleEndian.PutUint64(p[off+11:], synced)
			c := crc32.Checksum(p[off+6:end], crcTable)
			binary.LittleEndian.PutUint32(p[off:], (c>>15|c<<17)+0xa282ead8)
		}
		off = end
	}
}
