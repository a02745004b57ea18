package local

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// snapshotMagic starts every snapshot; opEnd (with the record count) ends
// a complete one.
const (
	snapshotMagic      = "IDGSNAP1"
	opEnd         byte = 4
)

// files lists DIR's journal and snapshot generations, ascending; with
// clean it removes the leftovers of writes that never finished (*.tmp).
func files(dir string, clean bool) (journals, snapshots []uint64, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, de := range entries {
		name := de.Name()
		if strings.HasSuffix(name, ".tmp") {
			if clean {
				_ = os.Remove(filepath.Join(dir, name))
			}
			continue
		}
		var list *[]uint64
		var rest string
		switch {
		case strings.HasPrefix(name, "journal-") && strings.HasSuffix(name, ".log"):
			list, rest = &journals, strings.TrimSuffix(strings.TrimPrefix(name, "journal-"), ".log")
		case strings.HasPrefix(name, "snapshot-") && strings.HasSuffix(name, ".dat"):
			list, rest = &snapshots, strings.TrimSuffix(strings.TrimPrefix(name, "snapshot-"), ".dat")
		default:
			continue
		}
		if gen, perr := strconv.ParseUint(rest, 16, 64); perr == nil && len(rest) == 16 {
			*list = append(*list, gen)
		}
	}
	slices.Sort(journals)
	slices.Sort(snapshots)
	return journals, snapshots, nil
}

// recover loads the newest snapshot and replays the journals written
// after it, drops expired records, and opens the last journal for
// appending (truncating a torn tail) or starts the first one.
func (e *Engine) recover() error {
	began := time.Now()
	journals, snapshots, err := files(e.dir, true)
	if err != nil {
		return fmt.Errorf("store: embedded store: %w", err)
	}
	recs := map[string]*rec{}
	var base uint64 // the snapshot's generation: journals before it are covered
	if n := len(snapshots); n > 0 {
		base = snapshots[n-1]
		size, err := loadSnapshot(filepath.Join(e.dir, snapshotName(base)), recs)
		if err != nil {
			return err
		}
		e.snapshotBytes = size
	}
	var last uint64
	var lastSize int64
	for i, gen := range journals {
		path := filepath.Join(e.dir, journalName(gen))
		if gen < base {
			_ = os.Remove(path) // a compaction finished but had not yet removed it
			continue
		}
		valid, torn, err := replayJournal(path, recs)
		if err != nil {
			return err
		}
		e.recovered.JournalBytes += valid
		e.recovered.TornBytes += torn
		if torn > 0 && i == len(journals)-1 {
			if err := os.Truncate(path, valid); err != nil {
				return fmt.Errorf("store: embedded store: drop the torn end of %s: %w", path, err)
			}
		}
		last, lastSize = gen, valid
	}
	for _, gen := range snapshots {
		if gen < base {
			_ = os.Remove(filepath.Join(e.dir, snapshotName(gen)))
		}
	}

	now := e.now()
	for _, r := range recs {
		if r.expireAt <= now {
			e.recovered.Expired++
			continue
		}
		e.add(r)
	}
	e.recovered.Records = len(e.slots)

	if last == 0 || last < base {
		gen := max(base, 1)
		f, err := createJournal(e.dir, gen)
		if err != nil {
			return fmt.Errorf("store: embedded store: %w", err)
		}
		e.jf, e.gen, e.journalBytes = f, gen, int64(len(journalMagic))
	} else {
		f, err := os.OpenFile(filepath.Join(e.dir, journalName(last)), os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("store: embedded store: %w", err)
		}
		e.jf, e.gen, e.journalBytes = f, last, lastSize
	}
	e.recovered.Took = time.Since(began)
	return nil
}

// loadSnapshot reads a complete snapshot into recs.
func loadSnapshot(path string, recs map[string]*rec) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("store: embedded store: %w", err)
	}
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("store: embedded store: snapshot %s is damaged (%s): restore DIR from a backup", path, why)
	}
	rest, ok := strings.CutPrefix(string(b), snapshotMagic)
	if !ok {
		return bad("no snapshot header")
	}
	data := []byte(rest)
	for n := uint64(0); ; n++ {
		payload, more, ok := nextFrame(data)
		if !ok {
			return bad("it ends early")
		}
		data = more
		d := &reader{b: payload[1:]}
		switch payload[0] {
		case opPut:
			r, err := decodePut(d)
			if err != nil {
				return bad("a record does not decode")
			}
			r.size = int64(len(payload) + frameHeader)
			recs[r.ID] = r
		case opEnd:
			if d.uvarint() != n || d.err != nil {
				return bad("record count")
			}
			return int64(len(b)), nil
		default:
			return bad("unknown entry")
		}
	}
}

// replayJournal applies a journal's entries to recs, up to the first
// torn or damaged one; valid is the length of the good prefix, torn what
// follows it.
func replayJournal(path string, recs map[string]*rec) (valid, torn int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("store: embedded store: %w", err)
	}
	if len(b) < len(journalMagic) || string(b[:len(journalMagic)]) != journalMagic {
		// Created but its header never reached the disk: nothing in it
		// was acknowledged.
		return 0, int64(len(b)), nil
	}
	data := b[len(journalMagic):]
	valid = int64(len(journalMagic))
	for len(data) > 0 {
		payload, more, ok := nextFrame(data)
		if !ok || len(payload) == 0 {
			break
		}
		d := &reader{b: payload[1:]}
		switch payload[0] {
		case opPut:
			r, err := decodePut(d)
			if err != nil {
				return valid, int64(len(b)) - valid, nil
			}
			r.size = int64(len(payload) + frameHeader)
			recs[r.ID] = r
		case opAttempt, opRenew:
			id, v := d.string(), d.varint()
			if d.err != nil {
				return valid, int64(len(b)) - valid, nil
			}
			if r := recs[id]; r != nil {
				if payload[0] == opAttempt {
					r.Attempts = v
				} else {
					r.LeaseUntil = timeOf(v)
				}
			}
		default:
			return valid, int64(len(b)) - valid, nil
		}
		valid += int64(len(data) - len(more))
		data = more
	}
	return valid, int64(len(b)) - valid, nil
}

// liveRecords are the records a snapshot keeps. Called with mu held.
func (e *Engine) liveRecords() []*rec {
	out := make([]*rec, 0, len(e.slots))
	for _, s := range e.slots {
		out = append(out, s.cur)
	}
	return out
}

// writeSnapshot writes snapshot gen (the records as of the start of
// journal gen) aside, fsyncs and renames it, then removes the journals
// and snapshots it covers. Records are immutable once published, so it
// runs without the lock.
func (e *Engine) writeSnapshot(gen uint64, recs []*rec) (int64, error) {
	path := filepath.Join(e.dir, snapshotName(gen))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	size := int64(0)
	var buf []byte
	now := e.now()
	n := uint64(0)
	write := func(b []byte) {
		if err == nil {
			_, err = w.Write(b)
			size += int64(len(b))
		}
	}
	write([]byte(snapshotMagic))
	for _, r := range recs {
		if r.expireAt <= now {
			continue
		}
		var start int
		buf, start = beginFrame(buf[:0])
		buf = endFrame(appendPut(buf, r), start)
		write(buf)
		n++
	}
	buf, start := beginFrame(buf[:0])
	buf = endFrame(binary.AppendUvarint(append(buf, opEnd), n), start)
	write(buf)
	if err == nil {
		err = w.Flush()
	}
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
		err = syncDir(e.dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("store: embedded store: write snapshot: %w", err)
	}
	journals, snapshots, _ := files(e.dir, false)
	for _, g := range journals {
		if g < gen {
			_ = os.Remove(filepath.Join(e.dir, journalName(g)))
		}
	}
	for _, g := range snapshots {
		if g < gen {
			_ = os.Remove(filepath.Join(e.dir, snapshotName(g)))
		}
	}
	return size, nil
}
