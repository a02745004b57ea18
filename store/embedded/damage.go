package embedded

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	crerrors "github.com/cockroachdb/errors"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
)

// The clean marker: Close writes a random nonce into the database (a
// synced write, the last one) and into DIR/clean. Open, finding
// DIR/clean, requires the database to hold that nonce: Pebble takes a
// damaged last entry of its log for a write a crash cut short and drops
// it quietly, which after a clean stop would drop acknowledged writes.
// Open then removes DIR/clean, so after a crash the rule is Pebble's: only
// the last write is dropped when it cannot be read (cut short or damaged:
// the two read alike), and Open says so (see checkLogTail).
const (
	cleanFile  = "clean"
	cleanMagic = "IDGCLN1\n"
	nonceSize  = 16
)

var cleanKey = []byte{kindMeta, 'c', 'l', 'e', 'a', 'n'}

// markClean writes the clean marker. Called by Close after every call
// ended.
func (e *Engine) markClean() error {
	nonce := make([]byte, nonceSize)
	_, _ = rand.Read(nonce)
	if err := e.db.Set(cleanKey, nonce, pebble.Sync); err != nil {
		return e.writeErr(err)
	}
	b := append([]byte(cleanMagic), nonce...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return writeFileSync(filepath.Join(e.dir, cleanFile), b)
}

// checkClean checks the database against the clean marker's nonce, if
// any, and removes the marker. It opens the database read-only for that,
// so that a refusal leaves every file as it found it.
func (e *Engine) checkClean(nonce []byte) error {
	if nonce == nil {
		return nil
	}
	cache := pebble.NewCache(1 << 20)
	db, err := pebble.Open(filepath.Join(e.dir, dbDir), e.pebbleOptions(cache, true))
	cache.Unref()
	if err != nil {
		return damaged(e.dir, err)
	}
	v, closer, err := db.Get(cleanKey)
	same := err == nil && bytes.Equal(v, nonce)
	if closer != nil {
		_ = closer.Close()
	}
	_ = db.Close()
	switch {
	case err != nil && !errors.Is(err, pebble.ErrNotFound):
		return damaged(e.dir, err)
	case !same:
		return e.lostWrites()
	}
	if err := os.Remove(filepath.Join(e.dir, cleanFile)); err != nil {
		return fmt.Errorf("store: embedded store: %w", err)
	}
	return syncDir(e.dir)
}

// lostWrites is the refusal when the last write before a clean stop is
// missing.
func (e *Engine) lostWrites() error {
	logs, _ := filepath.Glob(filepath.Join(e.dir, dbDir, "*.log"))
	return fmt.Errorf("store: embedded store: %s is damaged: the last write before the clean stop is missing "+
		"(a damaged write-ahead log: %v); acknowledged records may be lost: restore DIR from a backup "+
		"(`idemgate store check %s` says more)", e.dir, logs, e.dir)
}

// readClean reads DIR/clean's nonce; nil when there is no marker.
func readClean(dir string) ([]byte, error) {
	path := filepath.Join(dir, cleanFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: embedded store: %w", err)
	}
	n := len(cleanMagic) + nonceSize
	if len(b) != n+4 || string(b[:len(cleanMagic)]) != cleanMagic ||
		crc32.Checksum(b[:n], crcTable) != binary.LittleEndian.Uint32(b[n:]) {
		return nil, fmt.Errorf("store: embedded store: %s is damaged (its checksum does not match); "+
			"it only marks a clean stop: check DIR with `idemgate store check %s`, then remove it", path, dir)
	}
	return slices.Clone(b[len(cleanMagic):n]), nil
}

// damaged names DIR and the damaged file in Pebble's refusal.
func damaged(dir string, err error) error {
	if !pebble.IsCorruptionError(err) {
		if !strings.Contains(err.Error(), "unknown to the objstorage provider") {
			return fmt.Errorf("store: embedded store %s: %w", dir, err)
		}
		// The manifest lists a file that is not there: the manifest
		// lost its last change, or the file was removed.
		m, _ := filepath.Glob(filepath.Join(dir, dbDir, "MANIFEST-*"))
		return fmt.Errorf("store: embedded store %s is damaged (%s lists a file that is missing): %w: restore DIR from a backup "+
			"(`idemgate store check %s` says more)", dir, strings.Join(m, ", "), err, dir)
	}
	return fmt.Errorf("store: embedded store %s is damaged (%s): %w: restore DIR from a backup "+
		"(`idemgate store check %s` says more)", dir, strings.Join(damagedFiles(dir, err), ", "), err, dir)
}

// tableNum finds the table Pebble names in a corruption error.
var tableNum = regexp.MustCompile(`(?:file|table) (\d{6})\b`)

// damagedFiles are the files a Pebble corruption error points at: the
// path it gives, the table it names, or else the write-ahead logs (a
// log replay error names none).
func damagedFiles(dir string, err error) []string {
	db := filepath.Join(dir, dbDir)
	for _, h := range strings.Split(crerrors.FlattenHints(err), "\n") {
		if p, ok := strings.CutPrefix(h, "path: "); ok {
			return []string{p}
		}
	}
	if m := tableNum.FindStringSubmatch(err.Error()); m != nil {
		if files, _ := filepath.Glob(filepath.Join(db, m[1]+".*")); len(files) > 0 {
			return files
		}
	}
	if strings.Contains(err.Error(), "WAL") || strings.Contains(err.Error(), "wal") {
		logs, _ := filepath.Glob(filepath.Join(db, "*.log"))
		return logs
	}
	if strings.Contains(err.Error(), "MANIFEST") || strings.Contains(err.Error(), "manifest") {
		m, _ := filepath.Glob(filepath.Join(db, "MANIFEST-*"))
		return m
	}
	return []string{db}
}

// checkManifest reads every record of DIR's current Pebble manifest
// (the one its marker names), at every start. Pebble takes a record it
// cannot read for the end of the manifest, a write a crash cut short, and
// quietly drops it and every record after it, and with them the tables
// they list. After a clean stop nothing was cut short, so such a record is
// damage. After a crash, only a last record that the end of the file cuts
// off (a write cut short: Pebble writes the manifest by appending and acts
// on a record only once it is synced) is dropped, and reported (dropped);
// any other unreadable record is damage. The error names the file and
// the record's offset; nothing when there is no manifest yet.
func checkManifest(dir string, clean bool) (dropped string, err error) {
	for _, path := range manifestPaths(dir) {
		n, off, err := readManifest(path)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, io.EOF) {
			continue
		}
		if !errors.Is(err, record.ErrInvalidChunk) && !errors.Is(err, record.ErrZeroedChunk) && !errors.Is(err, record.ErrUnexpectedEOF) {
			return "", fmt.Errorf("store: embedded store: %w", err)
		}
		if !clean {
			b, rerr := os.ReadFile(path)
			if rerr != nil {
				return "", fmt.Errorf("store: embedded store: %w", rerr)
			}
			if manifestCut(b, off) {
				return fmt.Sprintf("%s: the last record of the manifest, at offset %d, runs past the end of the file and is dropped: "+
					"a write the crash cut short, which Pebble acts on only once it is whole and synced", path, off), nil
			}
		}
		return "", fmt.Errorf("store: embedded store %s is damaged (%s): record %d at offset %d (after %d sound ones) cannot be read "+
			"(its checksum or header does not match: %v); Pebble would drop it and every record after it, and with them "+
			"tables of acknowledged records: restore DIR from a backup (`idemgate store check %s` says more)", dir, path, n+1, off, n, err, dir)
	}
	return "", nil
}

// readManifest reads the records of the manifest at path, as Pebble does,
// streaming. It returns io.EOF when every record reads, else the error of
// the first that does not, how many read before it and its offset.
func readManifest(path string) (n, off int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	rr := record.NewReader(f, 0)
	for ; ; n++ {
		off = int(rr.Offset())
		r, err := rr.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		if err != nil {
			return n, off, err
		}
	}
}

// manifestPaths is DIR's current manifest, the one its marker names (all
// of them when there is no marker).
func manifestPaths(dir string) []string {
	db := filepath.Join(dir, dbDir)
	markers, _ := filepath.Glob(filepath.Join(db, "marker.manifest.*"))
	var paths []string
	for _, m := range markers {
		parts := strings.SplitN(filepath.Base(m), ".", 4)
		if len(parts) == 4 {
			paths = append(paths, filepath.Join(db, parts[3]))
		}
	}
	if len(paths) == 0 {
		paths, _ = filepath.Glob(filepath.Join(db, "MANIFEST-*"))
	}
	return paths
}

// manifestCut reports whether the manifest record at off is a write cut
// short: its chunks are sound up to one that the end of the file cuts off,
// or only zeros are left.
func manifestCut(b []byte, off int) bool {
	for off < len(b) {
		if rest := walBlock - off%walBlock; rest < walLegacyHeader {
			off += rest // a block's zeroed end
			continue
		}
		if allZero(b[off:]) {
			return true
		}
		n, ok := chunkAt(b, off, walLegacyHeader)
		if !ok {
			cut := off+walLegacyHeader > len(b) || off+walLegacyHeader+int(binary.LittleEndian.Uint16(b[off+4:])) > len(b)
			return cut && !recordAfter(b, off)
		}
		off += n
	}
	return true
}

// recordAfter reports whether a sound chunk that starts a manifest record
// (a whole one, or its first part) begins after off: the chunk at off,
// then, is not the end of what was written (its length is damaged).
func recordAfter(b []byte, off int) bool {
	for next := off + 1; next+walLegacyHeader <= len(b); next++ {
		if t := b[next+6]; t == 1 || t == 2 {
			if n, ok := chunkAt(b, next, walLegacyHeader); ok && n > walLegacyHeader {
				return true
			}
		}
	}
	return false
}
