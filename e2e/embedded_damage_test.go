package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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
	for i := range keys {
		key := fmt.Sprintf("k%03d", i)
		if status, _, body, err := attempt(c, gw.url+"/keys/"+key, key); err != nil || status != http.StatusCreated {
			t.Fatalf("%s: %d %v %s", key, status, err, body)
		}
	}
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
