package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// Notes are findings that are not damage (a journal to import).
	Notes []string
}

// Check reads every file of DIR, which no gateway may hold meanwhile,
// and reports what is damaged: the secret and the clean marker (their
// checksums), every record of Pebble's manifest (whose damaged record
// Pebble would take for a torn end), Pebble's manifest and logs (by
// opening the database read-only), every table's every block checksum, and every record
// (that it decodes). It changes nothing in DIR.
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
	damage := func(format string, args ...any) { rep.Damage = append(rep.Damage, fmt.Sprintf(format, args...)) }

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

	if err := checkManifest(dir); err != nil {
		damage("%v", err)
	}
	if err := checkLogTail(dir); err != nil {
		damage("%v", err)
	}

	tables, _ := filepath.Glob(filepath.Join(dir, dbDir, "*.sst"))
	for _, path := range tables {
		if err := checkTable(path); err != nil {
			damage("%s: %v", path, err)
		}
		rep.Tables++
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
		return rep, nil
	}
	defer db.Close()
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
		r, err := decodeRecord(it.Value())
		if err != nil {
			damage("record %q does not decode", strings.TrimPrefix(string(it.Key()), "r"))
			continue
		}
		if r.expireAt > now {
			rep.Records[store.StoredState(r.State)]++
		}
	}
	if err := it.Error(); err != nil {
		damage("%v", damaged(dir, err))
	}
	return rep, nil
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
