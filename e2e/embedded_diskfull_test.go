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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/tmpfs"
)

// A full disk under the embedded store, on the real binary: requests fail
// closed (503, nothing forwarded) and, once space returns, the same
// gateway works again without losing or re-executing anything.

// writeFiller writes a file of size bytes at path.
func writeFiller(t *testing.T, path string, size int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{0xa5}, 1<<20)
	for size > 0 {
		n := min(size, len(chunk))
		if _, err := f.Write(chunk[:n]); err != nil {
			t.Fatalf("filler: %v", err)
		}
		size -= n
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedDiskFull: the store's DIR on a 128 MiB tmpfs, 80 MiB of it
// taken by a filler file placed before the gateway starts. Unique keys
// with 64 KB answers (incompressible) are sent by 8 clients until the
// gateway answers 503: memtables are flushed and tables compacted
// meanwhile (tables appear and are compacted away). The upstream, which
// counts its calls per key, saw nothing for a request refused (503); a
// request already forwarded when the disk filled gets its upstream's
// answer while the gateway keeps storing it in the background (SPEC: the
// call is never repeated). Then the filler is deleted: without a restart
// new keys execute once, every acknowledged key is replayed with its
// answer (one whose answer was still being stored is in flight, 409,
// until it lands), every refused key executes once now, and no key ran
// twice.
func TestEmbeddedDiskFull(t *testing.T) {
	t.Parallel()
	mnt := tmpfs.Mount(t, "128m")
	filler := filepath.Join(mnt, "filler")
	writeFiller(t, filler, 80<<20)

	answer := make([]byte, 64<<10)
	r := rand.New(rand.NewPCG(7, 9))
	for i := range answer {
		answer[i] = byte(r.Uint32())
	}
	var calls counter
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.add(r.URL.Path)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(r.URL.Path))
		_, _ = w.Write(answer)
	}))
	t.Cleanup(up.Close)
	dir := filepath.Join(mnt, "store")
	gw := startGateway(t, gatewayConfig{store: "embedded " + dir, upstream: strings.TrimPrefix(up.URL, "http://"), rules: embeddedRules})

	// Tables seen in DIR while the gateway runs; one that is gone later
	// was compacted away.
	seen := map[string]bool{}
	look := func() {
		files, _ := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
		for _, f := range files {
			seen[filepath.Base(f)] = true
		}
	}
	compacted := func() int {
		n := 0
		for f := range seen {
			if _, err := os.Stat(filepath.Join(dir, "db", f)); os.IsNotExist(err) {
				n++
			}
		}
		return n
	}

	const clients, limit, wantRefused = 8, 20000, 40
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var (
		mu       sync.Mutex
		acked    = map[string][]byte{} // 201: its answer
		refused  = map[string]int{}    // not 2xx: its status (or 0: no answer)
		statuses = map[int]int{}
		next     atomic.Int64
		nRefused atomic.Int64
		wg       sync.WaitGroup
	)
	began := time.Now()
	for range clients {
		wg.Go(func() {
			for nRefused.Load() < wantRefused {
				i := next.Add(1)
				if i > limit {
					return
				}
				key := fmt.Sprintf("d%05d", i)
				status, _, body, err := attempt(c, gw.url+"/keys/"+key, key)
				mu.Lock()
				statuses[status]++
				if err == nil && status == http.StatusCreated {
					acked[key] = body
				} else {
					refused[key] = status
					nRefused.Add(1)
				}
				mu.Unlock()
				if i%50 == 0 {
					mu.Lock()
					look()
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	look()
	sent := int(min(next.Load(), limit))
	if len(refused) == 0 {
		t.Fatalf("%d keys acknowledged, the disk never filled", len(acked))
	}
	if statuses[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("the disk filled, but no 503: statuses %v", statuses)
	}
	// Nothing forwarded for a refused request, except one whose answer
	// the store could not keep (forwarded, not acknowledged).
	inDoubt := 0
	for key := range refused {
		if calls.count("/keys/"+key) > 0 {
			inDoubt++
		}
	}
	for key := range acked {
		if n := calls.count("/keys/" + key); n != 1 {
			t.Errorf("%s acknowledged, upstream ran %d times", key, n)
		}
	}
	if got, want := calls.sum(), len(acked)+inDoubt; got != want {
		t.Errorf("upstream ran %d times for %d acknowledged and %d in doubt", got, len(acked), inDoubt)
	}
	compactedFull := compacted()
	t.Logf("disk full after %v: %d keys sent, %d acknowledged, %d refused (%d of them forwarded); statuses %v; upstream ran %d times; %d answers still being stored; %d tables seen, %d compacted away",
		time.Since(began).Round(time.Millisecond), sent, len(acked), len(refused), inDoubt, statuses, calls.sum(),
		strings.Count(gw.logs.String(), "recording the upstream outcome failed; retrying"), len(seen), compactedFull)
	t.Logf("the gateway said: %s", lastLine(gw.logs.String(), "disk is full"))

	// Space returns; the same process writes again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	var firstAfter string
	for i := 0; i < 300 && firstAfter == ""; i++ {
		key := fmt.Sprintf("a%03d", i)
		status, _, _, err := attempt(c, gw.url+"/keys/"+key, key)
		if err == nil && status == http.StatusCreated {
			firstAfter = key
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if firstAfter == "" {
		t.Fatalf("the gateway does not store again 30s after space returned:\n%s", lastLine(gw.logs.String(), "embedded store"))
	}
	t.Logf("writing again %v after the filler was deleted: %s", time.Since(freed).Round(time.Millisecond), lastLine(gw.logs.String(), "room again"))

	const later = 200
	for i := range later {
		key := fmt.Sprintf("n%03d", i)
		if status, _, body, err := attempt(c, gw.url+"/keys/"+key, key); err != nil || status != http.StatusCreated {
			t.Fatalf("new key %s after space returned: %d %v %s", key, status, err, body)
		}
		if n := calls.count("/keys/" + key); n != 1 {
			t.Errorf("new key %s ran upstream %d times", key, n)
		}
	}
	look()

	replayed, late, executedNow, held, twice := 0, 0, 0, 0, 0
	for key, first := range acked {
		status, isReplay, body, err := attempt(c, gw.url+"/keys/"+key, key)
		if err == nil && status == http.StatusConflict {
			// Its answer was being stored in the background when the
			// disk filled: in flight until it lands.
			late++
			for i := 0; i < 100 && err == nil && status == http.StatusConflict; i++ {
				time.Sleep(100 * time.Millisecond)
				status, isReplay, body, err = attempt(c, gw.url+"/keys/"+key, key)
			}
		}
		if err != nil || status != http.StatusCreated || !isReplay || !bytes.Equal(body, first) {
			t.Errorf("acknowledged %s on retry: %d replayed=%v %v (%d bytes, first %d)", key, status, isReplay, err, len(body), len(first))
			continue
		}
		replayed++
	}
	for key := range refused {
		before := calls.count("/keys/" + key)
		status, _, body, err := attempt(c, gw.url+"/keys/"+key, key)
		if err != nil {
			t.Fatalf("retry of refused %s: %v", key, err)
		}
		after := calls.count("/keys/" + key)
		switch {
		case after > 1:
			twice++
			t.Errorf("refused %s ran upstream %d times", key, after)
		case status == http.StatusCreated && after > before:
			executedNow++
		case before == 1 && (status == http.StatusConflict || status == http.StatusCreated):
			held++ // forwarded before: in flight or held, or its late answer
		default:
			t.Errorf("refused %s on retry: %d %s (upstream ran %d times)", key, status, body, after)
		}
	}
	for key := range acked {
		if n := calls.count("/keys/" + key); n != 1 {
			twice++
		}
	}
	t.Logf("after space returned, no restart: %d new keys executed once; %d of %d acknowledged keys replayed (%d of them in flight at first, their answer stored in the background); %d refused keys executed once now, %d in doubt not executed again; %d keys ran twice; %d tables seen in all, %d compacted away; the gateway stored %d answers in the background",
		later+1, replayed, len(acked), late, executedNow, held, twice, len(seen), compacted(), strings.Count(gw.logs.String(), "recorded the upstream outcome after retrying"))
	if twice > 0 {
		t.Errorf("%d keys ran upstream twice", twice)
	}
	if compactedFull == 0 {
		t.Errorf("no table was compacted away while the disk filled (%d tables seen)", len(seen))
	}
	if line := lastLine(gw.logs.String(), "gave up recording"); line != "" {
		t.Errorf("an answer given while the disk was full was never stored: %s", line)
	}
}

// fillUp writes a file at path until its filesystem is full.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0xa5}, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !strings.Contains(err.Error(), "no space") {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestEmbeddedDiskFullOutlastsLease: the disk fills while 40 calls are
// at the upstream (their claims on disk, lock_lease 1s), so the store
// refuses most of their 256 KiB results, and it stays full for three
// leases. Every client got its 201, and the gateway keeps every refused
// result (idemgate_kept_completions). Once space returns, without a
// restart, every acknowledged key replays the answer its client got
// (a kept result is written by its key's retry, or by the gateway in the
// background, whichever comes first), nothing is kept any more, and the
// upstream ran each key once.
func TestEmbeddedDiskFullOutlastsLease(t *testing.T) {
	t.Parallel()
	mnt := tmpfs.Mount(t, "48m")
	const keys, lease = 40, time.Second

	answer := make([]byte, 256<<10)
	r := rand.New(rand.NewPCG(11, 13))
	for i := range answer {
		answer[i] = byte(r.Uint32())
	}
	var calls counter
	arrived := make(chan struct{}, keys)
	answerNow := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.add(r.URL.Path)
		arrived <- struct{}{}
		<-answerNow
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(r.URL.Path))
		_, _ = w.Write(answer)
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() {
		select {
		case <-answerNow:
		default:
			close(answerNow)
		}
	})
	rules := strings.Replace(embeddedRules, "ttl: 1h", "ttl: 1h\n  lock_lease: "+lease.String(), 1)
	gw := startGateway(t, gatewayConfig{store: "embedded " + filepath.Join(mnt, "store"), extra: "op_timeout 500ms",
		upstream: strings.TrimPrefix(up.URL, "http://"), rules: rules})

	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: keys}}
	type first struct {
		key    string
		status int
		body   []byte
		err    error
	}
	firsts := make(chan first, keys)
	for i := range keys {
		go func() {
			key := fmt.Sprintf("l%02d", i)
			status, _, body, err := attempt(c, gw.url+"/keys/"+key, key)
			firsts <- first{key, status, body, err}
		}()
	}
	for range keys {
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d calls reached the upstream", calls.sum(), keys)
		}
	}
	// Every claim is on disk; the disk fills before any result is stored.
	filler := filepath.Join(mnt, "filler")
	fillUp(t, filler)
	close(answerNow)
	acked := map[string][]byte{}
	for range keys {
		f := <-firsts
		if f.err != nil || f.status != http.StatusCreated {
			t.Fatalf("%s: the upstream answered 201, the client got %d %v %s", f.key, f.status, f.err, f.body)
		}
		acked[f.key] = f.body
	}
	refused := strings.Count(gw.logs.String(), "recording the upstream outcome failed; retrying")
	if refused == 0 {
		t.Fatalf("the disk filled, but the store refused no result:\n%s", lastLine(gw.logs.String(), "embedded store"))
	}
	// The disk stays full for three leases.
	time.Sleep(3 * lease)
	gaveUp := strings.Count(gw.logs.String(), "gave up recording")
	refused = strings.Count(gw.logs.String(), "recording the upstream outcome failed; retrying") // every line is in by now
	keptFull := int(metric(t, gw, "idemgate_kept_completions"))
	if keptFull != refused {
		t.Errorf("%d results refused by the store, %d kept by the gateway", refused, keptFull)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	replayed, held, executedTwice := 0, 0, 0
	for key, body := range acked {
		res, err := do(c, "POST", gw.url+"/keys/"+key, []byte(`{"n":1}`), "Idempotency-Key", key)
		// 503 until the store has seen the room come back.
		for i := 0; i < 100 && err == nil && res.status == http.StatusServiceUnavailable; i++ {
			time.Sleep(100 * time.Millisecond)
			res, err = do(c, "POST", gw.url+"/keys/"+key, []byte(`{"n":1}`), "Idempotency-Key", key)
		}
		switch {
		case err != nil:
			t.Fatalf("retry of %s: %v", key, err)
		case res.status == http.StatusCreated && res.header.Get("Idempotent-Replayed") == "true" && bytes.Equal(res.body, body):
			replayed++
		case res.status == http.StatusConflict && res.kind() == "outcome-unknown":
			held++
			t.Errorf("acknowledged %s is held as outcome unknown: %s", key, res.body)
		default:
			t.Errorf("acknowledged %s on retry: %d replayed=%q %s", key, res.status, res.header.Get("Idempotent-Replayed"), res.kind())
		}
		if n := calls.count("/keys/" + key); n != 1 {
			executedTwice++
			t.Errorf("%s: upstream ran %d times", key, n)
		}
	}
	logs := gw.logs.String()
	keptAfter := int(metric(t, gw, "idemgate_kept_completions"))
	t.Logf("%d keys answered 201 while the disk filled, %d results refused by the store; the disk stayed full for %v (lock_lease %v): %d kept, %d given up; after space returned: %d of %d acknowledged keys replayed their answer (%d written by their retry, %d in the background), %d held, %d executed twice; %d still kept",
		keys, refused, 3*lease, lease, keptFull, gaveUp, replayed, len(acked), strings.Count(logs, `"tried_by"`), strings.Count(logs, "recorded the upstream outcome after retrying")-strings.Count(logs, `"tried_by"`),
		held, executedTwice, keptAfter)
	if keptAfter != 0 {
		t.Errorf("%d results still kept after all were replayed", keptAfter)
	}
	if line := lastLine(gw.logs.String(), "gave up recording"); line != "" {
		t.Errorf("an answer a client got was given up: %s", line)
	}
}
