package embedded

import (
	"fmt"
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
// entry to the file and then sync it, and walFS decides at the sync
// whether it reaches the disk:
//
//   - a write that must be durable (a claim, a release, a hold, an
//     operator's decision, a check's verdict, an undo) holds
//     walSync.durable while it commits: every sync of the log while one
//     is under way is a real fdatasync, shared by every commit it covers
//     (Pebble's group commit);
//   - a completion holds walSync.applied: a sync of the log while only
//     completions are under way writes the entry to the file (Pebble did
//     that before calling Sync) and leaves the fdatasync to the next
//     durable write or to the background sync (syncLoop), at most
//     SyncInterval later;
//   - any other sync (Pebble's own: a log closed, a write nobody counts)
//     is real.
//
// The log is sequential, so a real sync of a log file covers every
// completion written to it before; a log file with unsynced completions
// is synced for real when Pebble closes it.
type walSync struct {
	durable atomic.Int64 // commits under way that must be on disk when they return
	applied atomic.Int64 // completions under way

	mu    sync.Mutex
	files map[*walFile]struct{} // the open log files
}

// begin counts a commit under way (durable or only applied) and returns
// its end.
func (w *walSync) begin(durable bool) func() {
	n := &w.applied
	if durable {
		n = &w.durable
	}
	n.Add(1)
	return func() { n.Add(-1) }
}

// deferSync reports whether a sync of the log may stop at the file: only
// completions are under way.
func (w *walSync) deferSync() bool {
	return w.durable.Load() == 0 && w.applied.Load() > 0
}

// syncAll syncs every open log file written since its last sync.
func (w *walSync) syncAll() error {
	w.mu.Lock()
	files := make([]*walFile, 0, len(w.files))
	for f := range w.files {
		if f.unsynced.Load() {
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

// walFile is one log file being written.
type walFile struct {
	vfs.File
	w        *walSync
	unsynced atomic.Bool // written since its last real sync

	mu     sync.Mutex // syncNow against Close
	closed bool
}

// Write marks the file unsynced once the bytes are written (a sync that
// began before then may not cover them).
func (f *walFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.unsynced.Store(true)
	return n, err
}

// Sync is the log writer's sync: real unless only completions wait.
func (f *walFile) Sync() error {
	if f.w.deferSync() {
		return nil
	}
	f.unsynced.Store(false)
	return f.File.Sync()
}

// SyncData is Sync (Pebble's syncing file calls it).
func (f *walFile) SyncData() error {
	if f.w.deferSync() {
		return nil
	}
	f.unsynced.Store(false)
	return f.File.SyncData()
}

// syncNow syncs the file for real unless it is closed (then Close did).
// A failed sync leaves the file unsynced, so the next tick tries again
// (and the next durable write's sync, through Pebble, fails the claim
// that asked for it: nothing is forwarded on a log that cannot sync).
func (f *walFile) syncNow() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.unsynced.Store(false)
	err := f.File.SyncData()
	if err != nil {
		f.unsynced.Store(true)
	}
	return err
}

// Close syncs what a deferred sync left and closes the file.
func (f *walFile) Close() error {
	f.w.mu.Lock()
	delete(f.w.files, f)
	f.w.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	var err error
	if f.unsynced.Load() {
		err = f.File.SyncData()
	}
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncLoop makes completions durable at most SyncInterval after they were
// written, when no durable write did it first.
func (e *Engine) syncLoop() {
	defer e.done.Done()
	t := time.NewTicker(e.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			if err := e.wal.syncAll(); err != nil {
				e.opts.OnError(fmt.Errorf("store: embedded store %s: sync the log: %w", e.dir, err))
			}
		}
	}
}
