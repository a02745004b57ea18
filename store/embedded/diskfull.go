package embedded

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/idemgate/idemgate/store"
)

// ErrDiskFull is returned (wrapped, naming DIR) by every write while
// DIR's filesystem is full: the call fails closed (a claim lets nothing
// through) and the store writes again once there is room, without a
// restart. It is a store.ErrNoRoom.
var ErrDiskFull error = diskFullError{}

type diskFullError struct{}

func (diskFullError) Error() string { return "the disk is full" }
func (diskFullError) Unwrap() error { return store.ErrNoRoom }

// diskFullPoll is how often a full disk is looked at for room.
const diskFullPoll = 100 * time.Millisecond

// diskFull tracks DIR's filesystem running out of space. Pebble's file
// system wrapper (vfs.OnDiskFull) calls wait when a write meets ENOSPC:
// writes to the database stop until it returns, and then the write that
// failed is tried again. Meanwhile every call that would write fails at
// once.
type diskFull struct {
	e  *Engine
	on atomic.Bool
}

func (d *diskFull) init(e *Engine) { d.e = e }

// is reports whether the disk is full now.
func (d *diskFull) is() bool { return d.on.Load() }

// check is ErrDiskFull naming DIR while the disk is full.
func (d *diskFull) check() error {
	if d.on.Load() {
		return fmt.Errorf("embedded store %s: %w: the write failed closed; it works again once the disk has %d bytes free",
			d.e.dir, ErrDiskFull, d.e.opts.MinFreeSpace)
	}
	return nil
}

// wait is the ENOSPC callback: it marks the disk full and returns once
// the filesystem has MinFreeSpace free again (or the engine stops).
func (d *diskFull) wait() {
	d.on.Store(true)
	e := d.e
	e.opts.OnError(fmt.Errorf("store: embedded store %s: %w: writes fail (503, nothing forwarded) until it has %d bytes free",
		e.dir, ErrDiskFull, e.opts.MinFreeSpace))
	t := time.NewTicker(diskFullPoll)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			d.on.Store(false)
			return
		case <-t.C:
		}
		u, err := vfs.Default.GetDiskUsage(e.dir)
		if err == nil && u.AvailBytes >= uint64(e.opts.MinFreeSpace) {
			break
		}
	}
	d.on.Store(false)
	e.opts.OnError(fmt.Errorf("store: embedded store %s: the disk has room again; writes go on", e.dir))
}
