package embedded_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/embedded"
)

// damageRecords is how many completed records the damage tests write.
const damageRecords = 300

// damagedDir is a DIR holding damageRecords completed records in a
// table (flushed by a clean Close) and, when crashed, more in the log of
// a gateway that was killed (a copy of its DIR taken while it ran).
func damagedDir(t *testing.T, crashed bool) string {
	t.Helper()
	dir := t.TempDir()
	e, err := embedded.Open(embedded.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := range damageRecords {
		mustClaim(t, e, claimReq(id(i), "A"))
		mustComplete(t, e, id(i), "A", strings.Repeat("b", 200), time.Hour)
	}
	if _, err := e.Secret(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if !crashed {
		return dir
	}
	e = open(t, dir)
	for i := damageRecords; i < 2*damageRecords; i++ {
		mustClaim(t, e, claimReq(id(i), "A"))
		mustComplete(t, e, id(i), "A", strings.Repeat("b", 200), time.Hour)
	}
	return copyDir(t, dir)
}

// flip changes one byte of the file matching glob in dir at frac of its
// length and returns the file's path.
func flip(t *testing.T, dir, glob string, frac float64) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, glob))
	if len(files) == 0 {
		t.Fatalf("no %s in %s", glob, dir)
	}
	path := files[len(files)-1]
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		t.Fatalf("read %s: %d bytes, %v", path, len(b), err)
	}
	i := min(int(float64(len(b))*frac), len(b)-1)
	b[i] ^= 0x5a
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDamageIsLoud: one flipped byte in any file of DIR either makes Open
// refuse with an error naming the file, or loses no acknowledged record
// (every record reads back, or its read fails: a 503, never a second
// execution).
func TestDamageIsLoud(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name, glob string
		crashed    bool
	}{
		{"table", "db/*.sst", false},
		{"log after a clean stop", "db/*.log", false},
		{"log after a crash", "db/*.log", true},
		{"manifest", "db/MANIFEST-*", false},
		{"options", "db/OPTIONS-*", false},
		{"secret", "secret", false},
		{"clean marker", "clean", false},
	}
	for _, k := range kinds {
		for _, frac := range []float64{0.1, 0.5, 0.9} {
			t.Run(fmt.Sprintf("%s at %.0f%%", k.name, frac*100), func(t *testing.T) {
				t.Parallel()
				dir := damagedDir(t, k.crashed)
				path := flip(t, dir, k.glob, frac)
				want := damageRecords
				if k.crashed {
					want = 2 * damageRecords
				}
				rep, cerr := embedded.Check(dir)
				if cerr != nil {
					t.Fatalf("Check: %v", cerr)
				}
				e, err := embedded.Open(embedded.Options{Dir: dir})
				if err != nil {
					if !strings.Contains(err.Error(), filepath.Base(path)) {
						t.Fatalf("Open refused without naming %s: %v", filepath.Base(path), err)
					}
					if !strings.Contains(strings.Join(rep.Damage, "\n"), filepath.Base(path)) {
						t.Fatalf("Open refused, but Check's report does not name %s: %q", filepath.Base(path), rep.Damage)
					}
					t.Logf("refused: %v", err)
					return
				}
				defer e.Close()
				lost, failed := 0, 0
				for i := range want {
					r, err := e.Get(ctx, id(i))
					switch {
					case err != nil:
						failed++
					case r == nil:
						lost++
					}
				}
				if _, err := e.Secret(ctx); err != nil {
					failed++
				}
				t.Logf("opened; %d of %d records lost, %d reads failed closed; Check: %q", lost, want, failed, rep.Damage)
				if failed > 0 && len(rep.Damage) == 0 {
					t.Fatalf("reads fail, but Check found no damage")
				}
				if lost > 0 {
					t.Fatalf("%d acknowledged records lost silently", lost)
				}
			})
		}
	}
}

// TestCheckSoundDir: Check finds nothing wrong in a sound DIR and counts
// its records.
func TestCheckSoundDir(t *testing.T) {
	t.Parallel()
	dir := damagedDir(t, false)
	rep, err := embedded.Check(dir)
	if err != nil || len(rep.Damage) > 0 || rep.Records["completed"] != damageRecords || rep.Tables == 0 {
		t.Fatalf("Check of a sound DIR: %+v, %v", rep, err)
	}
}

// TestManifestDamageIsLoud: Pebble takes a manifest record whose checksum
// does not match for a write a crash cut short and drops it and what
// follows, quietly. A write cut short is cut off by the end of the file:
// one flipped byte anywhere in the manifest, after a clean stop or after
// a crash, makes Open refuse and Check report it, both naming the file.
func TestManifestDamageIsLoud(t *testing.T) {
	t.Parallel()
	for _, crashed := range []bool{false, true} {
		for _, frac := range []float64{0.1, 0.5, 0.9} {
			t.Run(fmt.Sprintf("crashed %v at %.0f%%", crashed, frac*100), func(t *testing.T) {
				t.Parallel()
				manifestDamageIsLoud(t, crashed, frac)
			})
		}
	}
}

// manifestDamageIsLoud is TestManifestDamageIsLoud with one byte flipped
// at frac of the manifest.
func manifestDamageIsLoud(t *testing.T, crashed bool, frac float64) {
	{
		{
			dir := damagedDir(t, crashed)
			path := flip(t, dir, "db/MANIFEST-*", frac)
			name := filepath.Base(path)
			rep, err := embedded.Check(dir)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if !strings.Contains(strings.Join(rep.Damage, "\n"), name) {
				t.Errorf("Check does not report %s: %q", name, rep.Damage)
			}
			e, err := embedded.Open(embedded.Options{Dir: dir})
			if err == nil {
				e.Close()
				t.Fatalf("Open with a byte of %s flipped after a clean stop: it opened", name)
			}
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("Open refused without naming %s: %v", name, err)
			}
			t.Logf("refused: %v", err)
		}
	}
}

// TestManifestCutShort: after a crash, a manifest whose last record the
// end of the file cuts off (a write the crash cut short, which Pebble had
// not acted on: the start of a record of 100 bytes, 20 of them written)
// opens, and Open and Check say that record is dropped, naming the
// manifest; Check finds no damage.
func TestManifestCutShort(t *testing.T) {
	t.Parallel()
	dir := damagedDir(t, true)
	manifests, _ := filepath.Glob(filepath.Join(dir, "db", "MANIFEST-*"))
	path := manifests[len(manifests)-1]
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	cut := append([]byte{0x12, 0x34, 0x56, 0x78, 100, 0, 1}, []byte(strings.Repeat("e", 20))...)
	if _, err := f.Write(cut); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := embedded.Check(dir)
	if err != nil || len(rep.Damage) > 0 || len(rep.Dropped) != 1 || !strings.Contains(rep.Dropped[0], filepath.Base(path)) {
		t.Fatalf("Check of a manifest cut short: %v; damage %q, dropped %q", err, rep.Damage, rep.Dropped)
	}
	e, err := embedded.Open(embedded.Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open of a manifest cut short: %v", err)
	}
	defer e.Close()
	if d := e.Recovered().Dropped; len(d) != 1 || !strings.Contains(d[0], filepath.Base(path)) {
		t.Fatalf("Open does not say the manifest's last record is dropped: %q", d)
	}
	t.Logf("dropped: %s", e.Recovered().Dropped[0])
}

// TestCheckLeftoverTable: a table the manifest does not list (a flush a
// crash interrupted, half written) is noted as a leftover, not damage,
// and not read: Check of such a DIR finds no damage however it is broken.
func TestCheckLeftoverTable(t *testing.T) {
	t.Parallel()
	dir := damagedDir(t, false)
	tables, _ := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table after a clean stop")
	}
	b, err := os.ReadFile(tables[len(tables)-1])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"half written", b[:len(b)/2]},
		{"empty", nil},
		{"whole", b},
	} {
		leftover := filepath.Join(dir, "db", "000900.sst")
		if err := os.WriteFile(leftover, tc.body, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := embedded.Check(dir)
		notes := strings.Join(rep.Notes, "\n")
		if err != nil || len(rep.Damage) > 0 || !strings.Contains(notes, "000900.sst") || !strings.Contains(notes, "interrupted") ||
			rep.Records["completed"] != damageRecords {
			t.Errorf("%s leftover: Check: %v; damage %q; notes %q; records %v", tc.name, err, rep.Damage, rep.Notes, rep.Records)
		}
	}
}

// TestDamagedLastLogBlockIsLoud: after a crash, Pebble takes an
// unreadable entry in the last 32 KiB block of its newest log for a write
// the crash cut short and drops it and every entry after it, quietly. One
// flipped byte there, with sound entries after it, makes Open refuse and
// Check report it, both naming the log; a log whose end alone was cut off
// still opens, with every entry before the cut.
func TestDamagedLastLogBlockIsLoud(t *testing.T) {
	t.Parallel()
	const before, after = 100, 40
	crashed := func(t *testing.T) string {
		dir := t.TempDir()
		e := open(t, dir)
		for i := range before {
			mustClaim(t, e, claimReq(id(i), "A"))
			mustComplete(t, e, id(i), "A", strings.Repeat("b", 200), time.Hour)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = open(t, dir)
		for i := before; i < before+after; i++ {
			mustClaim(t, e, claimReq(id(i), "A"))
			mustComplete(t, e, id(i), "A", strings.Repeat("b", 100), time.Hour)
		}
		return copyDir(t, dir) // as a kill -9 leaves it
	}
	for _, frac := range []float64{0.2, 0.5, 0.8} {
		t.Run(fmt.Sprintf("flipped at %.0f%%", frac*100), func(t *testing.T) {
			t.Parallel()
			dir := crashed(t)
			path := flip(t, dir, "db/*.log", frac)
			if info, _ := os.Stat(path); info.Size() >= 32<<10 {
				t.Fatalf("%s is %d bytes: not within one block", path, info.Size())
			}
			name := filepath.Base(path)
			rep, err := embedded.Check(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(rep.Damage, "\n"), name) {
				t.Errorf("Check does not report %s: %q", name, rep.Damage)
			}
			e, err := embedded.Open(embedded.Options{Dir: dir})
			if err != nil {
				if !strings.Contains(err.Error(), name) {
					t.Fatalf("Open refused without naming %s: %v", name, err)
				}
				t.Logf("refused: %v", err)
				return
			}
			defer e.Close()
			lost := 0
			for i := range before + after {
				if r, err := e.Get(ctx, id(i)); err == nil && r == nil {
					lost++
				}
			}
			t.Fatalf("opened with a byte of %s flipped: %d of %d acknowledged records lost", name, lost, before+after)
		})
	}
	t.Run("cut short", func(t *testing.T) {
		t.Parallel()
		dir := crashed(t)
		logs, _ := filepath.Glob(filepath.Join(dir, "db", "*.log"))
		path := logs[len(logs)-1]
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, info.Size()-50); err != nil {
			t.Fatal(err)
		}
		e, err := embedded.Open(embedded.Options{Dir: dir})
		if err != nil {
			t.Fatalf("a log whose end was cut off: %v", err)
		}
		defer e.Close()
		kept := 0
		for i := range before + after {
			if r, err := e.Get(ctx, id(i)); err == nil && r != nil {
				kept++
			}
		}
		if kept < before+after-1 {
			t.Fatalf("%d of %d records kept after cutting 50 bytes off the log's end", kept, before+after)
		}
		if d := e.Recovered().Dropped; len(d) != 1 || !strings.Contains(d[0], filepath.Base(path)) {
			t.Fatalf("Open does not say the log's last entry is dropped: %q", d)
		}
		t.Logf("cut short: %d of %d records kept", kept, before+after)
	})
}

// TestUnsyncedLogPageLost: a power cut can leave the log's unsynced end
// on disk with a page missing and later pages written (the page cache
// writes them back in no particular order). That is the log's unsynced
// end, not damage: the store opens, says what it dropped, and every
// claim, synced before its request went on, is there.
func TestUnsyncedLogPageLost(t *testing.T) {
	t.Parallel()
	const claims, results = 50, 150
	dir := t.TempDir()
	// A log Pebble opened on an existing database: in the format whose
	// chunks say how far the log was synced (a new database's first log
	// is in an older format, see checkLogTail).
	if err := open(t, dir).Close(); err != nil {
		t.Fatal(err)
	}
	e := open(t, dir)
	for i := range claims {
		mustClaim(t, e, claimReq(id(i), "A"))
	}
	for i := range results { // their results: written, not synced
		mustComplete(t, e, id(i%claims), "A", strings.Repeat("r", 300), time.Hour)
	}
	crashed := copyDir(t, dir)
	_ = e.Close()

	logs, _ := filepath.Glob(filepath.Join(crashed, "db", "*.log"))
	path := logs[len(logs)-1]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The first whole page after the last synced offset any chunk names,
	// with at least two pages written after it.
	synced := int64(0)
	for off := 0; off+19 <= len(b); off++ {
		if b[off+6] >= 9 && b[off+6] <= 12 {
			if s := int64(binary.LittleEndian.Uint64(b[off+11:])); s > synced && s <= int64(len(b)) {
				synced = s
			}
		}
	}
	page := (synced/4096 + 1) * 4096
	if page+3*4096 > int64(len(b)) {
		t.Fatalf("%s: %d bytes, synced up to %d: no unsynced page with pages after it", path, len(b), synced)
	}
	clear(b[page : page+4096])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	e, err = embedded.Open(embedded.Options{Dir: crashed})
	if err != nil {
		t.Fatalf("a log missing an unsynced page (at %d, synced up to %d): %v", page, synced, err)
	}
	defer e.Close()
	for i := range claims {
		r, err := e.Get(ctx, id(i))
		if err != nil || r == nil {
			t.Fatalf("claim %d lost: %v, %v", i, r, err)
		}
	}
	t.Logf("synced up to %d of %d bytes; page at %d missing: opened, dropped %q", synced, len(b), page, e.Recovered().Dropped)
}
