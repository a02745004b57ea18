package embedded

import (
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// pebbleOptions are the database's options: a bounded cache and
// memtables, bloom filters (a new key's claim is answered without a
// table read), the disk-full handling, and Pebble's messages to OnError.
func (e *Engine) pebbleOptions(cache *pebble.Cache, readOnly bool) *pebble.Options {
	fs := e.opts.fs
	if fs == nil {
		fs = vfs.Default
	}
	e.wal.init()
	o := &pebble.Options{
		// The log's syncs wait for the disk only for writes that must
		// be durable (walsync.go).
		FS:                          walFS{FS: vfs.OnDiskFull(fs, e.full.wait), w: &e.wal},
		Cache:                       cache,
		MemTableSize:                uint64(e.opts.MemTableSize),
		MemTableStopWritesThreshold: 4,
		// Writes do not stop while level 0 waits for a compaction (a
		// stall longer than OpTimeout would fail requests); reads look
		// at more files meanwhile. CockroachDB runs with the same.
		L0StopWritesThreshold: 1000,
		// Records are keyed by random ids, so every table spans the whole
		// key space, and a compaction out of level 0 rewrites every table
		// of the level it goes to. With Pebble's defaults that level is
		// the only one below level 0 until DIR holds 64 MiB, and
		// compactions wrote 20 bytes per byte flushed (measured over
		// 320 000 executes); a base level of 8 MiB, with the bulk one
		// level further down, and level 0 compacted at 6 tables instead
		// of 4, write 5.
		L0CompactionThreshold: 6,
		LBaseMaxBytes:         8 << 20,
		MaxOpenFiles:          256,
		ReadOnly:              readOnly,
		FormatMajorVersion:    pebble.FormatNewest,
		Logger:                pebbleLogger{e},
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				e.opts.OnError(fmt.Errorf("store: embedded store %s: %w", e.dir, err))
			},
			DataCorruption: e.corrupted,
			// A write committed in its caller would wait out a stall
			// (inline.go).
			WriteStallBegin: func(pebble.WriteStallBeginInfo) { e.gate.stalled.Store(true) },
			WriteStallEnd:   func() { e.gate.stalled.Store(false) },
		},
	}
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	return o
}

// pebbleLogger hands Pebble's errors to OnError and keeps its chatter
// out of the gateway's log. Fatalf ends the process, as Pebble requires
// (it calls it when its log or manifest can no longer be written; what
// was acknowledged is on disk).
type pebbleLogger struct{ e *Engine }

func (pebbleLogger) Infof(string, ...any) {}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.e.opts.OnError(fmt.Errorf("store: embedded store %s: "+format, append([]any{l.e.dir}, args...)...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "store: embedded store %s: fatal: "+format+"\n", append([]any{l.e.dir}, args...)...)
	os.Exit(70)
}

// corrupted is Pebble's report of a damaged file: from then on every call
// fails closed, naming the file, and OnError hears of it once.
func (e *Engine) corrupted(info pebble.DataCorruptionInfo) {
	err := fmt.Errorf("store: embedded store %s is damaged: %s: %w; every call fails until DIR is restored from a backup "+
		"(`idemgate store check %s` says more)", e.dir, info.Path, info.Details, e.dir)
	if e.damage.CompareAndSwap(nil, &err) {
		e.opts.OnError(err)
	}
}
