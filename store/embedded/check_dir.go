package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/idemgate/idemgate/store"
)

// Report is what Check found in DIR.
type Report struct {
	Dir string
	// Records counts the live records by state (store.StoredState).
	Records map[string]int
	// Tables is how many table files were read whole.
	Tables int
	// Damage says, one line per finding, what is damaged; empty when
	// DIR is sound.
	Damage []string
	// Dropped says, one line each, what the next start drops as a write a
	// crash cut short: an unreadable last entry of the newest log (or last
	// record of the manifest), which a single log cannot tell from damage.
	// Not damage: a backup would not have it either.
	Dropped []string
	// Notes are findings that are not damage (a journal to import, the
	// leftover of an interrupted flush).
	Notes []string
}

// Check reads every file of DIR the database uses, which no gateway may
// hold meanwhile, and reports what is damaged: the secret and the clean
// marker (their checksums), every record of Pebble's manifest (whose
// damaged record Pebble would take for a torn end) and the newest log's
// end (as Open does), Pebble's manifest and logs (by opening the database
// read-only), every block checksum of every table the manifest lists, and
// every record (that it decodes). Tables the manifest does not list are
// noted as leftovers of an interrupted flush; an unreadable last entry of
// the newest log is reported in Dropped. It changes nothing in DIR.
func Check(dir string) (Report, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Dir: dir, Records: map[string]int{}}
	if _, err := os.Stat(dir); err != nil {
		return rep, fmt.Errorf("store: embedded store: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return rep, err
	}
	defer lock.unlock()
	damage := func(format string, args ...any) {
		if line := fmt.Sprintf(format, args...); !slices.Contains(rep.Damage, line) {
			rep.Damage = append(rep.Damage, line)
		}
	}

	var secret []byte
	if secret, err = readSecret(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		damage("%v", err)
	}
	nonce, err := readClean(dir)
	if err != nil {
		damage("%v", err)
	}
	if j, s, _ := oldFiles(dir); len(j)+len(s) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d journal and %d snapshot files of an earlier version: imported at the next start", len(j), len(s)))
	}

	for _, check := range []func() (string, error){
		func() (string, error) { return checkManifest(dir, nonce != nil) },
		func() (string, error) { return checkLogTail(dir) },
	} {
		dropped, err := check()
		if err != nil {
			damage("%v", err)
		}
		if dropped != "" {
			rep.Dropped = append(rep.Dropped, dropped)
		}
	}

	if _, err := os.Stat(filepath.Join(dir, dbDir)); errors.Is(err, os.ErrNotExist) {
		return rep, nil
	}
	e := &Engine{dir: dir, opts: Options{OnError: func(error) {}}}
	e.full.init(e)
	cache := pebble.NewCache(8 << 20)
	defer cache.Unref()
	o := e.pebbleOptions(cache, true)
	o.EventListener.DataCorruption = func(info pebble.DataCorruptionInfo) {
		damage("%s: %v", info.Path, info.Details)
	}
	db, err := pebble.Open(filepath.Join(dir, dbDir), o)
	if err != nil {
		damage("%v", damaged(dir, err))
		rep.checkTables(nil, damage) // which the database uses is unknown: every one
		return rep, nil
	}
	defer db.Close()
	live, err := db.SSTables()
	if err != nil {
		damage("%v", damaged(dir, err))
		live = nil
	}
	rep.checkTables(live, damage)
	e.db = db
	if err := db.CheckLevels(nil); err != nil {
		damage("%v", damaged(dir, err))
	}
	if nonce != nil {
		v, closer, err := db.Get(cleanKey)
		if err == nil {
			if !bytes.Equal(v, nonce) {
				damage("%v", e.lostWrites())
			}
			_ = closer.Close()
		} else {
			damage("%v", e.lostWrites())
		}
	}
	if secret != nil {
		if digest, kept, err := e.secretDigest(); err == nil && kept && !bytes.Equal(digest, secretSum(secret)) {
			damage("%s is not the secret the records were made under", filepath.Join(dir, secretFile))
		}
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindRecord}, UpperBound: []byte{kindRecord + 1}})
	if err != nil {
		damage("%v", damaged(dir, err))
		return rep, nil
	}
	defer it.Close()
	now := e.now()
	for it.First(); it.Valid(); it.Next() {
		r, _, err := decodeValue(it.Value())
		if err != nil {
			damage("record %q does not decode", strings.TrimPrefix(string(it.Key()), "r"))
			continue
		}
		if r != nil && r.ExpireAt > now { // not a tombstone alone, nor expired
			rep.Records[store.StoredState(r.State)]++
		}
	}
	if err := it.Error(); err != nil {
		damage("%v", damaged(dir, err))
	}
	return rep, nil
}

// checkTables verifies the tables of DIR the database uses, live (by
// level, from DB.SSTables; nil: every table file). A table file it does
// not use is the leftover of a flush or compaction (half written when a
// crash interrupted it, or obsolete and not yet removed): noted, not
// checked; Pebble removes it at the next start.
func (rep *Report) checkTables(live [][]pebble.SSTableInfo, damage func(string, ...any)) {
	used := map[string]bool{}
	for _, level := range live {
		for _, t := range level {
			used[t.BackingSSTNum.String()+".sst"] = true
		}
	}
	tables, _ := filepath.Glob(filepath.Join(rep.Dir, dbDir, "*.sst"))
	for _, path := range tables {
		if live != nil && !used[filepath.Base(path)] {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s is not used by the database: the leftover of a flush or compaction "+
				"(half written when a crash interrupted it, or made obsolete and not yet removed); not read, safe to ignore, "+
				"Pebble removes it at the next start", path))
			continue
		}
		if err := checkTable(path); err != nil {
			damage("%s: %v", path, err)
		}
		rep.Tables++
	}
}

// checkTable verifies every block checksum of one table file.
func checkTable(path string) error {
	f, err := vfs.Default.Open(path)
	if err != nil {
		return err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return err
	}
	r, err := sstable.NewReader(context.Background(), readable, sstable.ReaderOptions{})
	if err != nil {
		_ = readable.Close()
		return err
	}
	defer r.Close()
	return r.ValidateBlockChecksums()
}
