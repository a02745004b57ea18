package embedded

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

// An earlier version kept the records in a journal of its own
// (DIR/journal-N.log, DIR/snapshot-N.dat: frames, see codec.go). Open
// imports such a DIR once: it reads the newest snapshot and the journals
// after it (as that version did: a torn last entry of the last journal,
// never acknowledged, is dropped; any other damage refuses), writes the
// live records into the database in one synced batch, and then moves the
// old files into DIR/journal-imported, which is kept (remove it once the
// gateway runs well).
const (
	journalMagic  = "IDGJRNL1"
	snapshotMagic = "IDGSNAP1"
	opEnd         = 4 // ends a snapshot, with its record count
	importedDir   = "journal-imported"
)

// oldFiles lists DIR's journal and snapshot files of the earlier
// version, ascending by generation.
func oldFiles(dir string) (journals, snapshots []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, de := range entries {
		name := de.Name()
		for _, k := range []struct {
			prefix, suffix string
			list           *[]string
		}{{"journal-", ".log", &journals}, {"snapshot-", ".dat", &snapshots}} {
			rest, ok := strings.CutPrefix(name, k.prefix)
			if !ok || !strings.HasSuffix(rest, k.suffix) {
				continue
			}
			gen := strings.TrimSuffix(rest, k.suffix)
			if _, err := strconv.ParseUint(gen, 16, 64); err == nil && len(gen) == 16 {
				*k.list = append(*k.list, name)
			}
		}
	}
	slices.Sort(journals) // fixed-width hex: names sort by generation
	slices.Sort(snapshots)
	return journals, snapshots, nil
}

// migrate imports an earlier version's journal, once; it returns how
// many live records it imported.
func (e *Engine) migrate() (int, error) {
	journals, snapshots, err := oldFiles(e.dir)
	if err != nil {
		return 0, fmt.Errorf("store: embedded store: %w", err)
	}
	if len(journals) == 0 && len(snapshots) == 0 {
		return 0, nil
	}
	refuse := func(file, why string) (int, error) {
		return 0, fmt.Errorf("store: embedded store: importing %s (written by an earlier version) failed: %s is damaged (%s): "+
			"restore DIR from a backup, or start the earlier version on it to let its records expire", e.dir, filepath.Join(e.dir, file), why)
	}
	recs := map[string]*rec{}
	base := ""
	if n := len(snapshots); n > 0 {
		base = strings.TrimSuffix(strings.TrimPrefix(snapshots[n-1], "snapshot-"), ".dat")
		if why := loadSnapshot(filepath.Join(e.dir, snapshots[n-1]), recs); why != "" {
			return refuse(snapshots[n-1], why)
		}
	}
	for i, name := range journals {
		gen := strings.TrimSuffix(strings.TrimPrefix(name, "journal-"), ".log")
		if gen < base {
			continue // covered by the snapshot
		}
		torn, why := replayJournal(filepath.Join(e.dir, name), recs)
		if why != "" {
			return refuse(name, why)
		}
		if torn && i < len(journals)-1 {
			return refuse(name, "it ends early, and a later journal follows it")
		}
	}
	b := e.db.NewBatch()
	defer b.Close()
	now, n := e.now(), 0
	for _, r := range recs {
		if r.ExpireAt <= now {
			continue
		}
		if old, err := e.read(r.ID); err != nil {
			return 0, err
		} else if old != nil {
			continue // imported by an earlier start that stopped before moving the files
		}
		if err := putRecord(b, nil, r, tomb{}); err != nil { // journals kept no tombstones
			return 0, err
		}
		n++
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, e.writeErr(err)
	}
	to := filepath.Join(e.dir, importedDir)
	if err := os.MkdirAll(to, 0o700); err != nil {
		return 0, fmt.Errorf("store: embedded store: %w", err)
	}
	for _, name := range append(journals, snapshots...) {
		if err := os.Rename(filepath.Join(e.dir, name), filepath.Join(to, name)); err != nil {
			return 0, fmt.Errorf("store: embedded store: %w", err)
		}
	}
	if err := syncDir(e.dir); err != nil {
		return 0, fmt.Errorf("store: embedded store: %w", err)
	}
	return n, nil
}

// loadSnapshot reads a complete snapshot into recs; why is "" or what
// is wrong with it.
func loadSnapshot(path string, recs map[string]*rec) (why string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	rest, ok := strings.CutPrefix(string(b), snapshotMagic)
	if !ok {
		return "no snapshot header"
	}
	data := []byte(rest)
	for n := uint64(0); ; n++ {
		payload, more, ok := nextFrame(data)
		if !ok || len(payload) == 0 {
			return "it ends early"
		}
		data = more
		d := &reader{b: payload[1:]}
		switch payload[0] {
		case opPut:
			r, err := decodePut(d)
			if err != nil {
				return "a record does not decode"
			}
			recs[r.ID] = r
		case opEnd:
			if d.uvarint() != n || d.err != nil {
				return "record count"
			}
			return ""
		default:
			return "unknown entry"
		}
	}
}

// replayJournal applies a journal's entries to recs. A damaged entry is
// taken for a torn write (torn) only when nothing but zeroes or less
// than one frame follows it, as a crash mid-write leaves; why says what
// else is wrong.
func replayJournal(path string, recs map[string]*rec) (torn bool, why string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err.Error()
	}
	if len(b) < len(journalMagic) || string(b[:len(journalMagic)]) != journalMagic {
		// Created but its header never reached the disk: nothing in
		// it was acknowledged.
		return len(b) > 0, ""
	}
	data := b[len(journalMagic):]
	for len(data) > 0 {
		payload, more, ok := nextFrame(data)
		if !ok || len(payload) == 0 {
			if validFrameIn(data[1:]) {
				return false, fmt.Sprintf("the entry at offset %d is damaged and good entries follow it", len(b)-len(data))
			}
			return true, ""
		}
		d := &reader{b: payload[1:]}
		switch payload[0] {
		case opPut:
			r, err := decodePut(d)
			if err != nil {
				return false, fmt.Sprintf("an entry at offset %d does not decode", len(b)-len(data))
			}
			recs[r.ID] = r
		case opAttempt, opRenew:
			id, v := d.string(), d.varint()
			if d.err != nil {
				return false, fmt.Sprintf("an entry at offset %d does not decode", len(b)-len(data))
			}
			if r := recs[id]; r != nil {
				if payload[0] == opAttempt {
					r.Attempts = v
				} else {
					r.LeaseUntil = store.TimeOfMillis(v)
				}
			}
		default:
			return false, fmt.Sprintf("an unknown entry at offset %d", len(b)-len(data))
		}
		data = more
	}
	return false, ""
}

// validFrameIn reports whether a whole, checksummed journal entry
// starts anywhere in b: what a torn last write cannot be followed by.
func validFrameIn(b []byte) bool {
	for k := range b {
		if p, _, ok := nextFrame(b[k:]); ok && len(p) > 0 && p[0] >= opPut && p[0] <= opRenew {
			return true
		}
	}
	return false
}

// dropCompletedIndex deletes the state index keys of completed records
// that an earlier version wrote (completed records have none now: see
// indexed), once, with one range deletion.
func (e *Engine) dropCompletedIndex() error {
	from, to := indexKey(stateIdx(store.StateCompleted), ""), indexKey(stateIdx(store.StateCompleted)+1, "")
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: to})
	if err != nil {
		return e.readErr(err)
	}
	found := it.First()
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return e.readErr(err)
	case !found:
		return nil
	}
	return e.writeErr(e.db.DeleteRange(from, to, pebble.Sync))
}
