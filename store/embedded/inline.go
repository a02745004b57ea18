package embedded

import (
	"context"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Commits in the caller. A waited write is committed by the goroutine
// that asked for it when nothing can make Pebble's commit wait for long:
// handing it to a goroutine of its own and waking the caller again cost
// a sixth of a serial execute's CPU. Pebble's commit waits for long only
// on a full disk (its log writer, its flushes and then the memtables
// wait for room: diskfull.go) or in a write stall (the memtables wait
// for a flush), and there the caller must be able to stop waiting (a
// claim that timed out is undone when its write lands). So a write is
// committed in the caller only while
//
//   - the disk is not full,
//   - no write stall is under way (Pebble's WriteStallBegin and
//     WriteStallEnd events), and
//   - the file system had at least inlineRoom (plus MinFreeSpace) free
//     at its last look (at open, then every SyncInterval): what the
//     store writes in one interval (the log, a flush, a compaction) is
//     far below that, so the disk does not fill under a write committed
//     in its caller unless something else takes that much space within
//     one interval.
//
// Otherwise the write goes to a goroutine of its own and its caller
// waits at most OpTimeout (commit); a write nobody waits for (a replay's
// attempt count, a renewal: committed without a sync) is then not
// waited for at all. In the one case left, a disk filled
// by another process within one interval, the writes then under way
// wait for room like Pebble's own; a claim among them whose caller gave
// up meanwhile is undone once it lands, as after a timeout, and nothing
// is forwarded.
const inlineRoom = 256 << 20

// inlineGate says whether a write may be committed in its caller.
type inlineGate struct {
	stalled atomic.Bool // a write stall is under way
	roomy   atomic.Bool // the disk had inlineRoom free at the last look
}

// inline reports whether a waited write may be committed in its caller.
func (e *Engine) inline() bool {
	return e.gate.roomy.Load() && !e.gate.stalled.Load() && !e.full.is()
}

// lookForRoom notes whether the disk has room for commits in the caller.
func (e *Engine) lookForRoom() {
	u, err := vfs.Default.GetDiskUsage(e.dir)
	e.gate.roomy.Store(err == nil && u.AvailBytes >= uint64(e.opts.room+e.opts.MinFreeSpace))
}

// commitInline commits w in its caller (see inline) and releases it. A
// claim whose caller stopped waiting while it was committed (ctx ended)
// is undone, as one that lands after its wait timed out.
func (e *Engine) commitInline(ctx context.Context, w *write, dur durability) error {
	end := e.wal.begin(dur == synced)
	err := end(w.b.Commit(pebble.Sync))
	_ = w.b.Close()
	if cerr := ctx.Err(); cerr != nil && err == nil && w.undo {
		e.undo(w.id, w.prev, w.wrote.rec)
		w.release(errAbandoned)
		if ferr := e.full.check(); ferr != nil {
			return ferr
		}
		return cerr
	}
	w.release(err)
	return e.writeErr(err)
}
