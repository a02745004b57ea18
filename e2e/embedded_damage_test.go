package e2e

import (
	bin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Damage is loud, on the real binary: one flipped byte in any kind of file
// of an embedded store's DIR either makes the gateway refuse to start,
// naming the file, or loses nothing acknowledged; `idemgate store check`
// names the damaged file.

// startOrExit runs a written gateway until its port accepts connections
// (started) or it exits on its own (refused, with the error it exited with).
func (g *gateway) startOrExit(limit time.Duration) (started bool, exit error) {
	g.t.Helper()
	g.run()
	g.exited = make(chan struct{})
	var waitErr error
	go func() { waitErr = g.cmd.Wait(); close(g.exited) }()
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-g.exited:
			return false, waitErr
		default:
		}
		// The gateway's own port, not the admin endpoint: that answers
		// before the store is opened.
		if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(g.url, "http://"), time.Second); err == nil {
			conn.Close()
			g.t.Cleanup(g.stop)
			return true, nil
		}
		if time.Now().After(deadline) {
			g.stop()
			g.t.Fatalf("the gateway neither started nor exited in %v:\n%s", limit, g.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// copyDir copies the regular files of the tree src to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if de.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if !de.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		info, err := in.Stat()
		if err != nil {
			return err
		}
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// flipByte inverts the bits of the byte at offset of path.
func flipByte(t *testing.T, path string, offset int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[offset] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// storeCheck runs `idemgate store check dir`: its exit status and output.
func storeCheck(t *testing.T, dir string) (int, string) {
	t.Helper()
	out, err := exec.Command(binary, "store", "check", dir).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	default:
		t.Fatalf("store check %s: %v: %s", dir, err, out)
		return 0, ""
	}
}

// TestEmbeddedDamageIsLoud: a gateway completes 200 keys on `store embedded
// DIR` and is stopped, cleanly or by kill -9. Then, for each kind of file
// in DIR (a table, the write-ahead log, the manifest, the options file, the
// secret, the clean-stop marker; those a crash left), a fresh copy of DIR
// gets one byte of that file flipped, `idemgate store check` is run on it
// (exit 1, naming the file), and a gateway is started on it: it refuses to
// start with an error naming the file, or it starts and retrying every key
// executes none of them again. `store check` on the sound DIR exits 0.
func TestEmbeddedDamageIsLoud(t *testing.T) {
	t.Parallel()
	for _, crashed := range []bool{false, true} {
		name := "clean stop"
		if crashed {
			name = "kill -9"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			damageEachKind(t, crashed)
		})
	}
}

// damageEachKind is TestEmbeddedDamageIsLoud after a clean stop or a crash.
func damageEachKind(t *testing.T, crashed bool) {
	const keys = 200
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: embeddedRules})
	c := &http.Client{Timeout: 10 * time.Second}
	completeKeys(t, c, gw.url, 0, keys)
	if crashed {
		gw.kill()
	} else {
		gw.stop()
	}
	sound := filepath.Join(gw.dir, "store")

	var files []string
	_ = filepath.WalkDir(sound, func(path string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			info, _ := de.Info()
			rel, _ := filepath.Rel(sound, path)
			files = append(files, fmt.Sprintf("%s (%d B)", rel, info.Size()))
		}
		return nil
	})
	t.Logf("DIR after the stop: %s", strings.Join(files, ", "))

	if code, out := storeCheck(t, sound); code != 0 {
		t.Fatalf("store check on the sound DIR: exit %d:\n%s", code, out)
	} else {
		t.Logf("store check on the sound DIR: exit 0: %s", strings.TrimSpace(out))
	}

	// pick finds the file of a kind: the last one in name order (the
	// highest number) or, with first, the first one.
	pick := func(pattern string, first bool) string {
		matches, _ := filepath.Glob(filepath.Join(sound, pattern))
		switch {
		case len(matches) == 0:
			return ""
		case first:
			return matches[0]
		}
		return matches[len(matches)-1]
	}
	// Every kind of file, and whether `store check` must name it when
	// damaged. The oldest log is, after a clean stop, one a flush made
	// obsolete, which Pebble keeps to write its next logs into (it reads
	// nothing from it; after a crash it is replayed), and Pebble checksums no
	// OPTIONS file (it reads only the comparer's and merger's names there
	// and writes a new one at every start): a flipped byte there must lose
	// nothing, but is not damage `store check` can see.
	kinds := []struct {
		name, pattern string
		first         bool
		checked       bool
	}{
		{"table", "db/*.sst", false, true},
		{"wal", "db/*.log", false, true},
		{"wal-oldest", "db/*.log", true, false},
		{"manifest", "db/MANIFEST-*", false, true},
		{"options", "db/OPTIONS-*", false, false},
		{"secret", "secret", false, true},
		{"clean", "clean", false, true},
	}
	var mu sync.Mutex
	var summary []string
	t.Cleanup(func() {
		sort.Strings(summary)
		t.Logf("summary:\n%s", strings.Join(summary, "\n"))
	})
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			orig := pick(k.pattern, k.first)
			if crashed && (orig == "" || (k.first && orig == pick(k.pattern, false))) {
				t.Skipf("no %s file (%s) after a crash", k.name, k.pattern)
			}
			if orig == "" {
				t.Fatalf("no %s file (%s) in %s", k.name, k.pattern, sound)
			}
			info, err := os.Stat(orig)
			if err != nil {
				t.Fatal(err)
			}
			if info.Size() == 0 {
				t.Fatalf("%s is empty: no byte to flip", orig)
			}
			rel, _ := filepath.Rel(sound, orig)
			dir := filepath.Join(t.TempDir(), "store")
			copyDir(t, sound, dir)
			damagedFile := filepath.Join(dir, rel)
			offset := info.Size() / 2
			flipByte(t, damagedFile, offset)
			base := filepath.Base(damagedFile)

			code, out := storeCheck(t, dir)
			if k.checked && (code != 1 || !strings.Contains(out, base)) {
				t.Errorf("store check with a byte of %s flipped: exit %d, want 1 naming %s:\n%s", rel, code, base, out)
			}
			checkLine := lastLine(out, "DAMAGED")

			up := newUpstream(t)
			g := writeGateway(t, gatewayConfig{store: "embedded " + dir, upstream: up.addr(), rules: embeddedRules})
			started, exit := g.startOrExit(30 * time.Second)
			logs := g.logs.String()
			var result string
			if !started {
				if !strings.Contains(logs, base) {
					t.Errorf("the gateway refused to start (%v) without naming %s:\n%s", exit, base, logs)
				}
				result = fmt.Sprintf("refused to start (%v): %s", exit, lastLine(logs, base))
			} else {
				statuses := map[int]int{}
				replayed := 0
				for i := range keys {
					key := fmt.Sprintf("k%03d", i)
					status, isReplay, _, err := attempt(c, g.url+"/keys/"+key, key)
					if err != nil {
						t.Fatalf("retry of %s: %v", key, err)
					}
					statuses[status]++
					if isReplay {
						replayed++
					}
				}
				executed := up.calls.sum()
				if executed != 0 {
					t.Errorf("with a byte of %s flipped the gateway started and %d of %d keys executed a second time", rel, executed, keys)
				}
				result = fmt.Sprintf("started; %d retries: %d replayed, statuses %v, %d executed again", keys, replayed, statuses, executed)
			}
			line := fmt.Sprintf("%-8s %s byte %d of %d flipped: store check exit %d %q; gateway %s",
				k.name, rel, offset, info.Size(), code, checkLine, result)
			t.Log(line)
			mu.Lock()
			summary = append(summary, line)
			mu.Unlock()
		})
	}
}

// manifestRecords are the offsets of the chunks of a Pebble manifest (7
// bytes of header, then the payload, in blocks of 32 KiB whose zeroed
// ends hold no chunk) and their payloads' lengths.
func manifestRecords(t *testing.T, path string) (offsets, lengths []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const block, header = 32 << 10, 7
	for off := 0; off+header <= len(b); {
		if rest := block - off%block; rest < header {
			off += rest
			continue
		}
		n := int(b[off+4]) | int(b[off+5])<<8
		if n == 0 && b[off+6] == 0 {
			break
		}
		offsets, lengths = append(offsets, off), append(lengths, n)
		off += header + n
	}
	return offsets, lengths
}

// flushRules are embeddedRules with a route whose 3 MiB answers fill
// Pebble's memtable: a few of them make flushes, tables the manifest
// lists, without a restart.
const flushRules = embeddedRules + `  - name: big
    match: { path: /big }
    key: ["{header.Idempotency-Key}"]
    max_response: 4MiB
`

// completeKeys sends keys k<from>…k<to-1> to the gateway at url, once
// each, and fails the test unless each is answered 201.
func completeKeys(t *testing.T, c *http.Client, url string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		key := fmt.Sprintf("k%03d", i)
		if status, _, body, err := attempt(c, url+"/keys/"+key, key); err != nil || status != http.StatusCreated {
			t.Fatalf("%s: %d %v %s", key, status, err, body)
		}
	}
}

// crashAfter runs a gateway on flushRules that completes keys keys (k000,
// k001, …) with bigs answers of 3 MiB among them, the last after the last
// key, and kills it with SIGKILL; it returns the gateway's DIR.
func crashAfter(t *testing.T, keys, bigs int) string {
	t.Helper()
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: flushRules})
	c := &http.Client{Timeout: 10 * time.Second}
	if bigs == 0 {
		completeKeys(t, c, gw.url, 0, keys)
	}
	for b := range bigs {
		completeKeys(t, c, gw.url, keys*b/bigs, keys*(b+1)/bigs)
		key := fmt.Sprintf("big%d", b)
		if status, _, body, err := attempt(c, gw.url+"/big", key); err != nil || status != http.StatusOK {
			t.Fatalf("%s: %d %v %.100s", key, status, err, body)
		}
	}
	gw.kill()
	return filepath.Join(gw.dir, "store")
}

// TestEmbeddedManifestDamageAfterCrash: a gateway completes keys, with
// answers of 3 MiB between them that make Pebble flush its memtable to
// tables the manifest lists, and is killed with SIGKILL. One byte of the manifest's second
// record is flipped: Pebble would take that record for a write the crash
// cut short and drop it and every record after it, and with them tables of
// acknowledged records. `idemgate store check` names the manifest (exit
// 1), and the gateway refuses to start naming it and the offset; no key
// executes again.
func TestEmbeddedManifestDamageAfterCrash(t *testing.T) {
	t.Parallel()
	const keys = 300
	dir := crashAfter(t, keys, 3)
	manifests, _ := filepath.Glob(filepath.Join(dir, "db", "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatalf("no manifest in %s", dir)
	}
	manifest := manifests[len(manifests)-1]
	offsets, lengths := manifestRecords(t, manifest)
	if len(offsets) < 3 || lengths[1] == 0 {
		t.Fatalf("%s has %d records (lengths %v): want a second one with records after it", manifest, len(offsets), lengths)
	}
	flipped := int64(offsets[1] + 7 + lengths[1]/2)
	flipByte(t, manifest, flipped)
	name := filepath.Base(manifest)
	t.Logf("flipped byte %d of %s, in record 2 of %d (at offset %d)", flipped, name, len(offsets), offsets[1])

	code, out := storeCheck(t, dir)
	if code != 1 || !strings.Contains(out, name) {
		t.Errorf("store check: exit %d, want 1 naming %s:\n%s", code, name, out)
	}

	up2 := newUpstream(t)
	g := writeGateway(t, gatewayConfig{store: "embedded " + dir, upstream: up2.addr(), rules: embeddedRules})
	started, exit := g.startOrExit(30 * time.Second)
	if !started {
		line := lastLine(g.logs.String(), name)
		if line == "" || !strings.Contains(line, fmt.Sprintf("offset %d", offsets[1])) {
			t.Fatalf("the gateway refused to start (%v) without naming %s and offset %d:\n%s", exit, name, offsets[1], g.logs.String())
		}
		t.Logf("refused to start (%v): %s", exit, line)
		return
	}
	c := &http.Client{Timeout: 10 * time.Second}
	replayed := 0
	for i := range keys {
		key := fmt.Sprintf("k%03d", i)
		_, isReplay, _, err := attempt(c, g.url+"/keys/"+key, key)
		if err != nil {
			t.Fatalf("retry of %s: %v", key, err)
		}
		if isReplay {
			replayed++
		}
	}
	t.Fatalf("with record 2 of %s damaged after a crash the gateway started: %d of %d acknowledged keys executed again (%d replayed)",
		name, up2.calls.sum(), keys, replayed)
}

// logChunks are the offsets of the chunks of a Pebble write-ahead log
// numbered num, in order, up to the first that is not one of num's (a
// recycled log's older entries, zeroes, the end of the file); a chunk's
// header size follows from its type: 7 bytes, 11 with the log's number, 19
// with a synced offset too.
func logChunks(t *testing.T, path string, num uint32) (offsets []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const block = 32 << 10
	for off := 0; off+11 <= len(b); {
		if rest := block - off%block; rest < 19 {
			off += rest
			continue
		}
		hs := map[bool]int{true: 11, false: 19}[b[off+6] <= 8]
		if b[off+6] < 5 || b[off+6] > 12 || bin.LittleEndian.Uint32(b[off+7:]) != num {
			break
		}
		offsets = append(offsets, off)
		off += hs + int(bin.LittleEndian.Uint16(b[off+4:]))
	}
	return offsets
}

// TestEmbeddedDroppedLastLogEntry: a gateway completes keys and is killed
// with SIGKILL; one byte of the last entry of its newest log (the last
// key's completion, synced and acknowledged) is flipped. A single log
// cannot tell that from a write the crash cut short, so Pebble drops it
// and the gateway starts; but it says so, in a WARN line naming the log
// and the offset, and `idemgate store check` reports the same (exit 3,
// not damage). Every other key replays.
func TestEmbeddedDroppedLastLogEntry(t *testing.T) {
	t.Parallel()
	const keys = 20
	dir := crashAfter(t, keys, 0)
	c := &http.Client{Timeout: 10 * time.Second}
	if code, out := storeCheck(t, dir); code != 0 {
		t.Fatalf("store check after the crash, before any flip: exit %d:\n%s", code, out)
	}

	logs, _ := filepath.Glob(filepath.Join(dir, "db", "*.log"))
	if len(logs) == 0 {
		t.Fatalf("no log in %s", dir)
	}
	path := logs[len(logs)-1]
	name := filepath.Base(path)
	num, err := strconv.ParseUint(strings.TrimSuffix(name, ".log"), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	chunks := logChunks(t, path, uint32(num))
	if len(chunks) < 2 {
		t.Fatalf("%s has %d entries of its own", name, len(chunks))
	}
	last := chunks[len(chunks)-1]
	flipByte(t, path, int64(last+30))
	t.Logf("flipped byte %d of %s, in its last entry (of %d, at offset %d)", last+30, name, len(chunks), last)

	code, out := storeCheck(t, dir)
	t.Logf("store check: exit %d:\n%s", code, out)
	if code != 3 || !strings.Contains(out, name) || !strings.Contains(out, fmt.Sprintf("offset %d", last)) {
		t.Errorf("store check: exit %d, want 3 naming %s and offset %d", code, name, last)
	}

	up2 := newUpstream(t)
	g := writeGateway(t, gatewayConfig{store: "embedded " + dir, upstream: up2.addr(), rules: embeddedRules})
	if started, exit := g.startOrExit(30 * time.Second); !started {
		t.Fatalf("the gateway refused to start (%v):\n%s", exit, g.logs.String())
	}
	warn := lastLine(g.logs.String(), name)
	if !strings.Contains(warn, `"level":"warn"`) || !strings.Contains(warn, fmt.Sprintf("offset %d", last)) {
		t.Errorf("no WARN line naming %s and offset %d in the start-up log:\n%s", name, last, g.logs.String())
	} else {
		t.Logf("start-up log: %s", warn)
	}
	statuses := map[string]int{}
	for i := range keys {
		key := fmt.Sprintf("k%03d", i)
		status, isReplay, _, err := attempt(c, g.url+"/keys/"+key, key)
		if err != nil {
			t.Fatalf("retry of %s: %v", key, err)
		}
		if i < keys-1 && !isReplay {
			t.Errorf("%s, acknowledged before the last write: %d, not replayed", key, status)
		}
		statuses[fmt.Sprintf("%d replayed=%v", status, isReplay)]++
	}
	t.Logf("retries: %v; executed again: %d (the last key's completion was the dropped entry)", statuses, up2.calls.sum())
}

// TestEmbeddedStoreCheckInterruptedFlush: a table a flush was writing when
// the gateway was killed is not in the manifest and is half written.
// `idemgate store check` judges the files the database uses: it reports
// the leftover as such, not as damage (exit 0), and still finds damage in
// a table the database uses (exit 1).
func TestEmbeddedStoreCheckInterruptedFlush(t *testing.T) {
	t.Parallel()
	dir := crashAfter(t, 0, 2)
	tables, _ := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
	if len(tables) == 0 {
		t.Fatalf("no table in %s after two answers of 3 MiB", dir)
	}
	// The largest table holds an answer of 3 MiB (its first half makes
	// the leftover below).
	var b []byte
	for _, path := range tables {
		if c, err := os.ReadFile(path); err == nil && len(c) > len(b) {
			b = c
		}
	}
	// The flush after the last one: a table numbered after every file, of
	// which the first half reached the disk.
	num, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(tables[len(tables)-1]), ".sst"))
	leftover := filepath.Join(dir, "db", fmt.Sprintf("%06d.sst", num+100))
	if err := os.WriteFile(leftover, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}

	code, out := storeCheck(t, dir)
	t.Logf("store check with %s half written: exit %d:\n%s", filepath.Base(leftover), code, out)
	if code != 0 || !strings.Contains(out, filepath.Base(leftover)) || !strings.Contains(out, "interrupted") {
		t.Errorf("store check: exit %d, want 0 naming %s as the leftover of an interrupted flush", code, filepath.Base(leftover))
	}

	// The largest table the database uses: the kill may also have left an
	// obsolete one behind (compacted, not yet removed), which store check
	// names in a note.
	var live string
	var size int
	for _, path := range tables {
		c, err := os.ReadFile(path)
		if err == nil && len(c) > size && !strings.Contains(lastLine(out, filepath.Base(path)), "not used by the database") {
			live, size = path, len(c)
		}
	}
	if live == "" {
		t.Fatalf("store check names every table as not used:\n%s", out)
	}
	// Near its end: its index and properties, small blocks (Pebble looks for
	// the one flipped bit of a damaged block, at a cost that grows with the
	// block squared: a data block of 3 MiB takes minutes).
	flipByte(t, live, int64(size-100))
	code, out = storeCheck(t, dir)
	t.Logf("store check with a byte of %s flipped too: exit %d:\n%s", filepath.Base(live), code, out)
	if code != 1 || lastLine(out, "DAMAGED") == "" || !strings.Contains(lastLine(out, "DAMAGED"), filepath.Base(live)) {
		t.Errorf("store check: exit %d, want 1 naming %s", code, filepath.Base(live))
	}
	if strings.Contains(lastLine(out, "DAMAGED"), filepath.Base(leftover)) {
		t.Errorf("store check calls the leftover %s damaged", filepath.Base(leftover))
	}
}
