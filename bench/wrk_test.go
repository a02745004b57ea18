package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWrkLoader drives a loopback server with wrk and the generated
// script for 1s: every request carries the body and headers, a unique
// key each for "unique", at most replayKeys keys for "replay", and the
// counts wrk reports match what the server saw.
func TestWrkLoader(t *testing.T) {
	bin, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("wrk not installed")
	}
	var served, badReq, otherSet atomic.Int64
	var keys seenKeys
	var wantSet atomic.Value
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != "POST" || string(body) != requestBody || r.Header.Get("Authorization") != benchAuth ||
			r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Idempotency-Key") == "" {
			badReq.Add(1)
		}
		served.Add(1)
		keys.add(r.Header.Get("Idempotency-Key"))
		if keySet(r.Header.Get("Idempotency-Key")) != wantSet.Load() {
			otherSet.Add(1)
		}
		if r.URL.Path == "/conflict" {
			w.WriteHeader(http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	w := &wrkLoader{bin: bin, dir: t.TempDir()}
	e := &env{runID: "test"}
	for _, v := range []variant{
		{name: "unique", path: "/x", keys: "unique", wantStatus: 201},
		{name: "replay", path: "/x", keys: "replay", wantStatus: 201},
		{name: "conflict", path: "/conflict", keys: "conflict", wantStatus: 409},
	} {
		// A server of its own for each run: Close waits for the requests
		// still in flight when wrk stopped.
		srv := httptest.NewServer(handler)
		addr := strings.TrimPrefix(srv.URL, "http://")
		keys.reset()
		served.Store(0)
		spec := loadSpec{addr: addr, conns: 4, threads: 2, duration: time.Second, req: e.requestSpec(v, addr, "t")}
		wantSet.Store(spec.req.set())
		res := w.run(spec)
		srv.Close()
		if res.firstErr != nil || res.requests == 0 || res.elapsed <= 0 || res.p50 <= 0 || res.p99 < res.p50 || res.genCPU < 0 {
			t.Fatalf("%s: %+v", v.name, res)
		}
		// The server saw the answered requests and at most one more per
		// connection (in flight when wrk stopped).
		if n := int(served.Load()); n < res.requests || n > res.requests+4 {
			t.Errorf("%s: wrk answered %d, server saw %d", v.name, res.requests, n)
		}
		if bad := badAnswers(v, res); bad != 0 {
			t.Errorf("%s: %d bad answers (%d over 399 of %d)", v.name, bad, res.over399, res.requests)
		}
		switch n := keys.count(); v.keys {
		case "unique":
			if n != int(served.Load()) {
				t.Errorf("unique keys: %d distinct of %d requests", n, served.Load())
			}
		case "replay":
			if n > replayKeys || n < 2 {
				t.Errorf("replay keys: %d distinct, want 2..%d", n, replayKeys)
			}
		case "conflict":
			if n > conflictKeys {
				t.Errorf("conflict keys: %d distinct, want at most %d", n, conflictKeys)
			}
		}
	}
	if otherSet.Load() != 0 {
		t.Errorf("%d keys outside their run's key set", otherSet.Load())
	}
	if badReq.Load() != 0 {
		t.Errorf("%d requests without the body or headers", badReq.Load())
	}
}

func TestParseWrk(t *testing.T) {
	res := &loadResult{}
	out := "Running 2s test @ http://127.0.0.1:1/v1/deals\n" +
		"BENCH requests=9000 duration_us=2000000 p50_us=1500 p99_us=9000 connect=0 read=1 write=0 status=3 timeout=2\n"
	if err := parseWrk(out, res); err != nil {
		t.Fatal(err)
	}
	if res.requests != 9000 || res.rps() != 4500 || res.p50 != 1500*time.Microsecond || res.p99 != 9*time.Millisecond ||
		res.over399 != 3 || res.errors != 3 {
		t.Errorf("parseWrk: %+v", res)
	}
	for _, bad := range []string{"", "BENCH requests=1", "BENCH requests=x duration_us=1"} {
		if err := parseWrk(bad, &loadResult{}); err == nil {
			t.Errorf("parseWrk(%q): no error", bad)
		}
	}
}

func TestBadAnswersCoarse(t *testing.T) {
	ok := variant{wantStatus: 201}
	conflict := variant{wantStatus: 409}
	r := &loadResult{coarse: true, requests: 100, over399: 2}
	if got := badAnswers(ok, r); got != 2 {
		t.Errorf("201 variant: %d bad, want 2", got)
	}
	if got := badAnswers(conflict, r); got != 98 {
		t.Errorf("409 variant: %d bad, want 98", got)
	}
}

func TestWrongCalls(t *testing.T) {
	exec := variant{executes: true}
	none := variant{}
	r := &loadResult{requests: 100, errors: 1}
	for _, tc := range []struct {
		v     variant
		calls int
		want  int
	}{
		{exec, 100, 0},
		{exec, 100 + 8 + 1, 0}, // in flight at the end, and the failed one
		{exec, 99, 1},          // an answer without an execution: a replay
		{exec, 120, 11},        // more executions than requests: duplicates
		{none, 0, 0},
		{none, 3, 3},
	} {
		if got := wrongCalls(tc.v, r, tc.calls, 8); got != tc.want {
			t.Errorf("executes=%v calls=%d: %d wrong, want %d", tc.v.executes, tc.calls, got, tc.want)
		}
	}
}
