package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The embedded store on the real binary: one owner per DIR, records that
// survive kill -9, and a DIR that stays bounded under expiry.

const embeddedRules = `
defaults:
  ttl: 1h
routes:
  - name: keys
    match: { methods: [POST], path: /keys/* }
    key: ["{header.Idempotency-Key}"]
`

// exitWithin runs a written gateway and waits for it to exit on its own;
// it fails the test when the gateway is still running after d.
func (g *gateway) exitWithin(d time.Duration) error {
	g.t.Helper()
	g.run()
	done := make(chan error, 1)
	go func() { done <- g.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = g.cmd.Process.Kill()
		<-done
		g.t.Fatalf("the gateway is still running after %v:\n%s", d, g.logs.String())
		return nil
	}
}

// TestEmbeddedOneGatewayPerDir: a second gateway on the same DIR (its own
// ports, so nothing else stops it) refuses to start, exits non-zero and
// says which DIR and which pid own it; the first keeps serving.
func TestEmbeddedOneGatewayPerDir(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	dir := filepath.Join(t.TempDir(), "shared")
	cfg := gatewayConfig{store: "embedded " + dir, upstream: up.addr(), rules: embeddedRules}
	first := startGateway(t, cfg)
	second := writeGateway(t, cfg)
	err := second.exitWithin(30 * time.Second)
	logs := second.logs.String()
	if err == nil {
		t.Fatalf("the second gateway exited 0:\n%s", logs)
	}
	want := []string{dir, "pid " + strconv.Itoa(first.cmd.Process.Pid), "owned by another running gateway"}
	for _, w := range want {
		if !strings.Contains(logs, w) {
			t.Errorf("the second gateway's error does not name %q:\n%s", w, logs)
		}
	}
	t.Logf("second gateway: %v; it said: %s", err, lastLine(logs, "owned by"))
	if r := send(t, "POST", first.url+"/keys/a", []byte("{}"), "Idempotency-Key", "a"); r.status != http.StatusCreated {
		t.Fatalf("the first gateway after the refusal: %d %s", r.status, r.body)
	}
}

func lastLine(s, containing string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], containing) {
			return lines[i]
		}
	}
	return ""
}

// TestEmbeddedKillRestartReplay: a completed request survives kill -9;
// after the restart its retry is replayed and the upstream ran once.
func TestEmbeddedKillRestartReplay(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: embeddedRules})
	first := send(t, "POST", gw.url+"/keys/deal", []byte(`{"amount":10}`), "Idempotency-Key", "deal-1")
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	gw.kill()
	gw.restart()
	retry := send(t, "POST", gw.url+"/keys/deal", []byte(`{"amount":10}`), "Idempotency-Key", "deal-1")
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(retry.body, first.body) {
		t.Fatalf("retry after kill -9: %d replayed=%q %s (first %s)", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body, first.body)
	}
	if n := up.count("/keys/deal"); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
}

// attempt is one client request that may get no answer (the gateway was
// killed under it).
func attempt(c *http.Client, url, key string) (status int, replayed bool, body []byte, err error) {
	r, err := do(c, "POST", url, []byte(`{"n":1}`), "Idempotency-Key", key)
	return r.status, r.header.Get("Idempotent-Replayed") == "true", r.body, err
}

// TestEmbeddedKillUnderLoad: 200 keys sent by 16 clients at once, the
// gateway killed with SIGKILL at a random moment, restarted, and every
// key retried. Every key ran upstream at most once; every key whose
// first answer reached its client before the crash is replayed with that
// answer after it (nothing acknowledged is lost); the others execute now
// (their claim never reached the disk) or are answered 409 (their claim
// did: in flight until its lease runs out, then held). Answers of 3 MiB
// sent meanwhile make Pebble flush (the kill may interrupt a flush or a
// compaction): `idemgate store check` after the kill finds no damage.
func TestEmbeddedKillUnderLoad(t *testing.T) {
	t.Parallel()
	const keys, clients, bigs = 200, 16, 8
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: flushRules})
	seed := uint64(time.Now().UnixNano())
	killAt := 20 + rand.New(rand.NewPCG(seed, 1)).IntN(keys-40) // answers before the kill
	t.Logf("seed %d: kill -9 after %d answers", seed, killAt)

	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var (
		mu      sync.Mutex
		acked   = map[string][]byte{} // key → body of the answer its client got
		answers atomic.Int64
		killed  sync.Once
		work    = make(chan int)
		wg      sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			for i := range work {
				key := fmt.Sprintf("k%03d", i)
				status, _, body, err := attempt(c, gw.url+"/keys/"+key, key)
				if err == nil && status == http.StatusCreated {
					mu.Lock()
					acked[key] = body
					mu.Unlock()
				}
				if err == nil && answers.Add(1) == int64(killAt) {
					killed.Do(gw.kill)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range bigs {
			if _, _, _, err := attempt(c, gw.url+"/big", fmt.Sprintf("big%d", i)); err != nil {
				return // killed
			}
		}
	})
	for i := range keys {
		work <- i
	}
	close(work)
	wg.Wait()
	killed.Do(gw.kill)
	c.CloseIdleConnections()

	// Exit 3 (the last log entry cut short by the kill) is no damage either.
	if code, out := storeCheck(t, filepath.Join(gw.dir, "store")); code != 0 && code != 3 {
		t.Errorf("store check after kill -9: exit %d:\n%s", code, out)
	} else {
		t.Logf("store check after kill -9: exit %d: %s", code, strings.Join(strings.Split(strings.TrimSpace(out), "\n"), " | "))
	}
	gw.restart()
	var replayed, executed, held, maxRuns int
	for i := range keys {
		key := fmt.Sprintf("k%03d", i)
		status, isReplay, body, err := attempt(c, gw.url+"/keys/"+key, key)
		if err != nil {
			t.Fatalf("retry of %s after the restart: %v", key, err)
		}
		runs := up.count("/keys/" + key)
		maxRuns = max(maxRuns, runs)
		if runs > 1 {
			t.Errorf("%s ran upstream %d times", key, runs)
		}
		first, wasAcked := acked[key]
		switch {
		case status == http.StatusCreated && isReplay:
			replayed++
			if wasAcked && !bytes.Equal(body, first) {
				t.Errorf("%s replayed %s, its client had %s", key, body, first)
			}
		case status == http.StatusCreated:
			executed++
			if wasAcked {
				t.Errorf("%s was answered before the crash but executed again after it", key)
			}
		case status == http.StatusConflict:
			held++
			if wasAcked {
				t.Errorf("%s was answered before the crash but is %d after it: %s", key, status, body)
			}
		default:
			t.Errorf("%s after the restart: %d %s", key, status, body)
		}
	}
	t.Logf("%d keys: %d answered before the kill; after the restart %d replayed, %d executed once now, %d in flight or held (409); at most %d upstream run per key",
		keys, len(acked), replayed, executed, held, maxRuns)
	if replayed < len(acked) {
		t.Errorf("%d replays for %d acknowledged keys", replayed, len(acked))
	}
}

// TestEmbeddedDiskBounded: six waves of 500 keys with 4 KB answers and a
// 1s ttl, each wave after the last one expired (12 MB written in all).
// DIR is Pebble's: its write-ahead logs are reused, at most four of a
// memtable's size (4 MiB) each, whatever was written; the tables hold the
// live records, and once everything expired the sweep and the compaction
// after it leave at most 1 MiB of tables.
func TestEmbeddedDiskBounded(t *testing.T) {
	answer := bytes.Repeat([]byte("x"), 4096)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(up.Close)
	rules := strings.Replace(embeddedRules, "ttl: 1h", "ttl: 1s", 1)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: strings.TrimPrefix(up.URL, "http://"), rules: rules})
	dir := filepath.Join(gw.dir, "store")
	size := func() int64 {
		var n int64
		_ = filepath.WalkDir(dir, func(_ string, de os.DirEntry, err error) error {
			if err == nil && !de.IsDir() {
				if info, err := de.Info(); err == nil {
					n += info.Size()
				}
			}
			return nil
		})
		return n
	}
	const waves, perWave, clients = 6, 500, 8
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var peak int64
	for w := range waves {
		work := make(chan int)
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for i := range work {
					key := fmt.Sprintf("w%d-%04d", w, i)
					if status, _, _, err := attempt(c, gw.url+"/keys/"+key, key); err != nil || status != http.StatusCreated {
						t.Errorf("%s: %d %v", key, status, err)
					}
				}
			})
		}
		for i := range perWave {
			work <- i
			if i%50 == 0 {
				peak = max(peak, size())
			}
		}
		close(work)
		wg.Wait()
		peak = max(peak, size())
		time.Sleep(1200 * time.Millisecond) // the wave expires
	}
	written, wave := int64(waves*perWave*len(answer)), int64(perWave*len(answer))
	tables := func() int64 {
		var n int64
		files, _ := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
		for _, f := range files {
			if info, err := os.Stat(f); err == nil {
				n += info.Size()
			}
		}
		return n
	}
	const logs = 4 * 4 << 20 // reused write-ahead logs
	var final int64
	for range 100 {
		if final = tables(); final <= 1<<20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	bound := 3*wave + logs + 2<<20
	t.Logf("%d keys, %d KB of answers stored; DIR peaked at %d KB (bound %d KB); after expiry %d KB of tables, %d KB in all",
		waves*perWave, written/1024, peak/1024, bound/1024, final/1024, size()/1024)
	if peak > bound {
		t.Errorf("DIR peaked at %d bytes for %d written: compaction did not keep up", peak, written)
	}
	if final > 1<<20 {
		t.Errorf("the tables hold %d bytes after every record expired, want at most 1 MiB", final)
	}
	if all := size(); all > logs+2<<20 {
		t.Errorf("DIR holds %d bytes after every record expired, want at most the logs and 2 MiB", all)
	}
}
