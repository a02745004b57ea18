package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const hostileRules = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
  - name: uploads
    match: { path: /uploads }
    key: ["{header.Idempotency-Key}"]
    max_body: 64MiB
`

// peakRSS reads the process's peak resident set size (VmHWM) in bytes.
func peakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("reading the gateway's memory: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// tooDeep checks a response is the 400 body-too-deep problem.
func tooDeep(r response) error {
	if r.status != http.StatusBadRequest ||
		r.header.Get("Content-Type") != "application/problem+json" || r.kind() != "body-too-deep" {
		return fmt.Errorf("got %d %q %.200s, want 400 body-too-deep problem+json", r.status, r.header.Get("Content-Type"), r.body)
	}
	return nil
}

// TestHostileBodies: bodies of nothing but '[' cost the gateway no more
// memory than their bytes and cannot end the process. Ten at once of 1 MB
// each raise its peak RSS by less than 64 MiB (they used to take it from
// about 50 MiB to 1.5 GiB: gjson.Valid recursed once per '[', growing the
// goroutine stacks), and each is answered 400 body-too-deep without
// reaching the upstream. On a route with max_body 64MiB, 40 MB of '['
// (which used to overflow the 1 GB goroutine stack, a fatal error that
// ended the whole process) is answered 400 too, and the gateway goes on
// serving.
func TestHostileBodies(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("peak RSS is read from /proc")
	}
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: hostileRules})
	pid := gw.cmd.Process.Pid
	if r := send(t, "POST", gw.url+"/deals", []byte(`{"amount":1}`), "Idempotency-Key", "warm-up"); r.status != http.StatusCreated {
		t.Fatalf("warm-up: %d %s", r.status, r.body)
	}

	t.Run("ten concurrent 1 MB bodies of [", func(t *testing.T) {
		before := peakRSS(t, pid)
		deep := bytes.Repeat([]byte("["), 1<<20)
		var wg sync.WaitGroup
		errs := make([]error, 10)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := do(client, "POST", gw.url+"/deals", deep, "Idempotency-Key", "deep-"+strconv.Itoa(i))
				if err == nil {
					err = tooDeep(r)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		after := peakRSS(t, pid)
		t.Logf("gateway peak RSS %d MiB before, %d MiB after (+%d MiB)", before>>20, after>>20, (after-before)>>20)
		for i, err := range errs {
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}
		// Each body is held once (10 MiB in all) while the Go runtime may
		// let the heap grow to twice its live size before collecting;
		// 64 MiB leaves room for that and nothing like the recursion.
		if grew := after - before; grew >= 64<<20 {
			t.Errorf("peak RSS grew by %d MiB, want under 64 MiB", grew>>20)
		}
		if n := up.count("/deals"); n != 1 {
			t.Errorf("upstream calls = %d, want only the warm-up", n)
		}
	})

	t.Run("40 MB of [ under max_body 64MiB", func(t *testing.T) {
		r, err := do(client, "POST", gw.url+"/uploads", bytes.Repeat([]byte("["), 40<<20), "Idempotency-Key", "deep-40MB")
		if err != nil {
			t.Fatalf("the gateway did not answer: %v", err)
		}
		if err := tooDeep(r); err != nil {
			t.Error(err)
		}
		select {
		case <-gw.exited:
			t.Fatalf("the gateway exited:\n%.2000s", gw.logs.String())
		default:
		}
		if r := send(t, "POST", gw.url+"/uploads", []byte(`{"file":"a"}`), "Idempotency-Key", "after-deep"); r.status != http.StatusCreated {
			t.Errorf("next request: %d %s, want 201", r.status, r.body)
		}
	})
}
