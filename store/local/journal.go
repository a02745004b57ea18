package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// journalMagic starts every journal file.
const journalMagic = "IDGJRNL1"

func journalName(gen uint64) string  { return fmt.Sprintf("journal-%016x.log", gen) }
func snapshotName(gen uint64) string { return fmt.Sprintf("snapshot-%016x.dat", gen) }

// round is one group commit: everything appended while it was the open
// round is written and fsync'd together; done closes after the fsync, err
// (set before) says whether it worked.
type round struct {
	done chan struct{}
	err  error
}

func newRound() *round { return &round{done: make(chan struct{})} }

// put publishes r as id's record and journals it; the caller waits for
// r.round. s is the record's slot, nil for a new record. Called with mu
// held.
func (e *Engine) put(s *slot, r *rec) {
	var start int
	e.buf, start = beginFrame(e.buf)
	e.buf = appendPut(e.buf, r)
	e.buf = endFrame(e.buf, start)
	r.size = int64(len(e.buf) - start)
	r.round = e.round
	if s == nil {
		e.add(r)
	} else {
		e.replace(s, r)
	}
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// note publishes r, a change nobody waits for (op opAttempt or opRenew,
// with its new value); it is written with the next commit. Called with mu
// held.
func (e *Engine) note(s *slot, r *rec, op byte, v int64) {
	var start int
	e.buf, start = beginFrame(e.buf)
	if op == opAttempt {
		e.buf = appendAttempt(e.buf, r.ID, v)
	} else {
		e.buf = appendRenew(e.buf, r.ID, v)
	}
	e.buf = endFrame(e.buf, start)
	r.round, r.size = s.cur.round, s.cur.size
	s.cur = r
}

// wait returns once rd's commit is on disk (at once for nil), or when the
// wait takes longer than OpTimeout or ctx ends.
func (e *Engine) wait(ctx context.Context, rd *round) error {
	if rd == nil {
		return nil
	}
	select {
	case <-rd.done:
		return rd.err
	default:
	}
	t := time.NewTimer(e.opts.OpTimeout)
	defer t.Stop()
	select {
	case <-rd.done:
		return rd.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the journal: %w", ctx.Err())
	case <-t.C:
		return fmt.Errorf("the journal's fsync took longer than %v", e.opts.OpTimeout)
	}
}

// commitLoop writes the journal: one round per kick (or every asyncFlush
// for changes nobody waits for), until stop.
func (e *Engine) commitLoop() {
	defer e.done.Done()
	tick := time.NewTicker(asyncFlush)
	defer tick.Stop()
	for {
		select {
		case <-e.kick:
		case <-tick.C:
		case <-e.stop:
			e.commit(false)
			return
		}
		e.commit(true)
	}
}

// commit writes and fsyncs what was appended since the last round, then
// starts a compaction when one is due (and allowed).
func (e *Engine) commit(mayCompact bool) {
	e.mu.Lock()
	data, rd := e.buf, e.round
	compact := mayCompact && e.compactDue()
	if len(data) == 0 && !compact {
		e.mu.Unlock()
		return
	}
	var snap []*rec
	var gen uint64
	if len(data) > 0 {
		e.buf, e.round = e.spare[:0], newRound()
	}
	if compact {
		snap, gen = e.liveRecords(), e.gen+1
		e.snapshotting = true
	}
	e.mu.Unlock()

	var err error
	if len(data) > 0 {
		if _, err = e.jf.Write(data); err == nil {
			err = unix.Fdatasync(int(e.jf.Fd()))
		}
		e.mu.Lock()
		e.journalBytes += int64(len(data))
		first := err != nil && e.failed == nil
		if first {
			e.failed = fmt.Errorf("journal write failed: %w", err)
		}
		e.mu.Unlock()
		if first {
			e.report(fmt.Errorf("store: embedded store %s: journal write failed, the store is stopped until restart: %w", e.dir, err))
		}
		rd.err = err
		if err != nil {
			rd.err = fmt.Errorf("journal write failed: %w", err)
		}
		close(rd.done)
		if cap(data) <= 4<<20 {
			e.spare = data[:0]
		} else {
			e.spare = nil
		}
	}
	if !compact {
		return
	}
	if err == nil {
		err = e.rotate(gen)
	}
	if err != nil {
		e.compacted(0, err)
		return
	}
	e.snapWG.Add(1)
	go func() {
		defer e.snapWG.Done()
		size, err := e.writeSnapshot(gen, snap)
		e.compacted(size, err)
	}()
}

// compactDue reports whether the files hold more than twice the live
// data plus CompactMin. Called with mu held.
func (e *Engine) compactDue() bool {
	if e.snapshotting || e.failed != nil || time.Now().Before(e.compactAfter) {
		return false
	}
	return e.snapshotBytes+e.journalBytes+int64(len(e.buf)) > 2*e.liveBytes+e.opts.CompactMin
}

// compacted ends a compaction: on success the snapshot's size is what the
// files hold now; a failure waits a minute before the next try (the old
// files still recover everything).
func (e *Engine) compacted(size int64, err error) {
	e.mu.Lock()
	e.snapshotting = false
	if err != nil {
		e.compactAfter = time.Now().Add(time.Minute)
	} else {
		e.snapshotBytes = size
	}
	e.mu.Unlock()
	if err != nil {
		e.report(fmt.Errorf("store: embedded store %s: compaction failed (retried in a minute; nothing is lost): %w", e.dir, err))
	}
}

// report hands a background failure to Options.OnError.
func (e *Engine) report(err error) {
	if e.opts.OnError != nil {
		e.opts.OnError(err)
	}
}

// rotate starts journal gen: later commits go there. Only the committer
// calls it.
func (e *Engine) rotate(gen uint64) error {
	f, err := createJournal(e.dir, gen)
	if err != nil {
		return err
	}
	old := e.jf
	e.jf = f
	_ = old.Close()
	e.mu.Lock()
	e.gen, e.journalBytes = gen, int64(len(journalMagic))
	e.mu.Unlock()
	return nil
}

// createJournal creates journal gen, durably (the file and its directory
// entry).
func createJournal(dir string, gen uint64) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, journalName(gen)), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err = f.WriteString(journalMagic); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// syncDir makes the directory's entries (new, renamed or removed files)
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeFileSync writes a file aside, fsyncs it and renames it into place.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
