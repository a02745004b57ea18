package main

import (
	"bufio"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/internal/proc"
)

// startChild starts a helper process logging to, and running in, dir.
func startChild(name, dir string, env []string, bin string, args ...string) (*proc.Process, error) {
	return proc.Start(name, proc.Options{LogDir: dir, WorkDir: dir, Env: env}, bin, args...)
}

// waitFor polls ready every 50ms until it returns nil, the child exits or
// the timeout passes.
func waitFor(c *proc.Process, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if !c.Running() {
			return fmt.Errorf("%s exited at start:\n%s", c.Name, c.Tail(20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %v\n%s", c.Name, timeout, err, c.Tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on Linux).
const clockTicks = 100

// cpuTime returns the CPU time (user + system) a process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(string(b))
}

// parseStat reads utime and stime (fields 14 and 15) of /proc/PID/stat.
// The command name (field 2) may contain spaces: fields are counted from
// the closing parenthesis.
func parseStat(s string) (time.Duration, error) {
	// utime is field 14, stime field 15.
	return statTicks(s, 14, 15)
}

// statTicks sums fields first to last of /proc/PID/stat, in clock ticks,
// as a duration.
func statTicks(s string, first, last int) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state).
	if len(f) < last-2 {
		return 0, errors.New("short /proc stat")
	}
	var ticks int64
	for _, x := range f[first-3 : last-2] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// selfCPU returns the CPU time this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss returns the VmRSS (resident set) and VmHWM (peak) of a process in KiB.
func rss(pid int) (cur, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return parseStatus(bufio.NewScanner(f))
}

func parseStatus(sc *bufio.Scanner) (cur, peak int64, err error) {
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %q: %w", name, value, err)
		}
		if name == "VmRSS" {
			cur = kb
		} else {
			peak = kb
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if cur == 0 {
		return 0, 0, errors.New("no VmRSS in /proc status")
	}
	return cur, peak, nil
}

// binaryVersions reads the Go and Caddy versions the gateway was built
// with.
func binaryVersions(path string) (goVersion, caddy string) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "unknown", "unknown"
	}
	goVersion, caddy = bi.GoVersion, "unknown"
	for _, d := range bi.Deps {
		if d.Path == "github.com/caddyserver/caddy/v2" {
			caddy = d.Version
		}
	}
	return goVersion, caddy
}

// httpReady returns nil once url answers at all.
func httpReady(url string) func() error {
	client := &http.Client{Timeout: time.Second}
	return func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}

// tasksetPath returns the path of util-linux's taskset, or "" when it is
// not installed.
func tasksetPath() string {
	p, _ := exec.LookPath("taskset")
	return p
}

// affinity returns the CPU list a process may run on ("0,1", "0-3").
func affinity(pid int) (string, error) {
	out, err := exec.Command("taskset", "-c", "-p", strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("taskset -p %d: %v: %s", pid, err, strings.TrimSpace(string(out)))
	}
	// "pid 42's current affinity list: 0,1"
	_, list, ok := strings.Cut(strings.TrimSpace(string(out)), "list: ")
	if !ok {
		return "", fmt.Errorf("taskset -p %d: %q", pid, out)
	}
	return list, nil
}

// setAffinity moves every thread of a process to the CPUs in list (new
// threads inherit it).
func setAffinity(pid int, list string) error {
	out, err := exec.Command("taskset", "-a", "-c", "-p", list, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -p %s %d: %v: %s", list, pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// loadAverage returns the 1-minute load average of /proc/loadavg, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
