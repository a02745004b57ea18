package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// wrkLoader drives the load with wrk (Debian's wrk 4.1), a separate
// process in C whose CPU time per request is a fraction of the Go
// generator's, so less of the machine goes to making the load. A Lua
// script gives every request the same body and headers and its own
// Idempotency-Key (thread number + counter), or one of the fixed keys of
// the replay and conflict variants.
//
// wrk counts answers with a status of 400 or more, not each status, and
// reads no header: the run's result is coarse, and measure checks the
// rest from the upstream's call count (a replay that reached the upstream
// is not a replay).
type wrkLoader struct {
	bin  string
	dir  string // for the scripts
	runs atomic.Int64
}

func (w *wrkLoader) describe() string { return "wrk (" + wrkVersion(w.bin) + ")" }

// wrkVersion returns the first line of wrk's banner, e.g. "wrk
// debian/4.1.0-3+b2 [epoll]".
func wrkVersion(bin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	line, _, _ := strings.Cut(string(out), "\n")
	if i := strings.Index(line, " Copyright"); i > 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

func (w *wrkLoader) run(spec loadSpec) *loadResult {
	res := &loadResult{statuses: map[int]int{}, coarse: true, genCPU: -1}
	fail := func(err error) *loadResult {
		res.errors++
		res.firstErr = err
		return res
	}
	script := filepath.Join(w.dir, fmt.Sprintf("wrk-%d.lua", w.runs.Add(1)))
	if err := os.WriteFile(script, []byte(luaScript(spec.req)), 0o644); err != nil {
		return fail(err)
	}
	defer os.Remove(script)
	// wrk takes whole seconds.
	secs := max(1, int(spec.duration.Round(time.Second)/time.Second))
	threads := max(1, min(spec.threads, spec.conns))
	args := []string{"-t", strconv.Itoa(threads), "-c", strconv.Itoa(spec.conns), "-d", strconv.Itoa(secs) + "s",
		"--timeout", "10s", "-s", script, "http://" + spec.addr + spec.req.path}
	bin := w.bin
	if spec.cpus != "" {
		args = append([]string{"-c", spec.cpus, bin}, args...)
		bin = "taskset"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			res.genCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	if err != nil {
		return fail(fmt.Errorf("wrk: %v: %s", err, lastLines(out.String(), 5)))
	}
	if err := parseWrk(out.String(), res); err != nil {
		return fail(err)
	}
	return res
}

// parseWrk reads the line the script's done() prints:
//
//	BENCH requests=N duration_us=N p50_us=N p99_us=N connect=N read=N write=N status=N timeout=N
func parseWrk(out string, res *loadResult) error {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "BENCH ")
		if !ok {
			continue
		}
		f := map[string]int64{}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("wrk: %q: %w", kv, err)
			}
			f[k] = n
		}
		for _, k := range []string{"requests", "duration_us", "p50_us", "p99_us", "connect", "read", "write", "status", "timeout"} {
			if _, ok := f[k]; !ok {
				return fmt.Errorf("wrk: no %s in %q", k, line)
			}
		}
		res.requests = int(f["requests"])
		res.elapsed = time.Duration(f["duration_us"]) * time.Microsecond
		res.p50 = time.Duration(f["p50_us"]) * time.Microsecond
		res.p99 = time.Duration(f["p99_us"]) * time.Microsecond
		res.over399 = int(f["status"])
		res.errors = int(f["connect"] + f["read"] + f["write"] + f["timeout"])
		if res.errors > 0 {
			res.firstErr = fmt.Errorf("wrk: %d connect, %d read, %d write errors, %d timeouts", f["connect"], f["read"], f["write"], f["timeout"])
		}
		return nil
	}
	return errors.New("wrk printed no BENCH line: " + lastLines(out, 5))
}

// luaScript is the wrk script for r. Each thread numbers its requests;
// a unique key is prefix + thread + "-" + number, a fixed one prefix +
// (number mod nkeys), offset per thread.
func luaScript(r requestSpec) string {
	return fmt.Sprintf(`-- written by the idemgate load benchmark (bench/wrk.go)
local prefix = %s
local nkeys = %d
local headers = {
  ["Host"] = %s,
  ["User-Agent"] = "idemgate-bench",
  ["Content-Type"] = "application/json",
  ["Authorization"] = %s,
}
wrk.method = "POST"
wrk.body = [==[%s]==]

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n = 0
function request()
  n = n + 1
  if nkeys > 0 then
    headers["Idempotency-Key"] = prefix .. ((tid * 7919 + n) %% nkeys)
  else
    headers["Idempotency-Key"] = prefix .. tid .. "-" .. n
  end
  return wrk.format(nil, nil, headers)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH requests=%%d duration_us=%%d p50_us=%%.0f p99_us=%%.0f connect=%%d read=%%d write=%%d status=%%d timeout=%%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end
`, luaString(r.prefix), r.nkeys, luaString(r.host), luaString(benchAuth), requestBody)
}

// luaString quotes s for Lua; s is printable ASCII (keys, hosts).
func luaString(s string) string { return strconv.Quote(s) }

// lastLines returns the last n lines of s, for error messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
