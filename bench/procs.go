package main

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// child is a process the benchmark started; stop ends it.
type child struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string // file with its output
}

func startChild(name, dir string, env []string, bin string, args ...string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits up to 10s, then kills.
func (c *child) stop() {
	if !c.running() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// tail returns the last lines of the child's log, for error messages.
func (c *child) tail() string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls ready every 50ms until it returns nil, the child exits or
// the timeout passes.
func waitFor(c *child, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if !c.running() {
			return fmt.Errorf("%s exited at start:\n%s", c.name, c.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %v\n%s", c.name, timeout, err, c.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisServer is a throw-away redis-server on loopback.
type redisServer struct {
	*child
	addr   string
	client *redis.Client
}

func startRedis(dir string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	rdir := filepath.Join(dir, "redis")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, err
	}
	c, err := startChild("redis", rdir, nil, bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", rdir, "--protected-mode", "yes")
	if err != nil {
		return nil, err
	}
	r := &redisServer{child: c, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	r.client = redis.NewClient(&redis.Options{Addr: r.addr, DisableIdentity: true})
	err = waitFor(c, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return r.client.Ping(ctx).Err()
	})
	if err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

func (r *redisServer) stop() {
	_ = r.client.Close()
	r.child.stop()
}

// info returns one field of INFO server (e.g. redis_version).
func (r *redisServer) info(section, field string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := r.client.Info(ctx, section).Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// roundTripP50 returns the median time of n EVALSHA calls of a script
// that only returns, sent one after the other: one bare Redis round trip
// of the kind the gateway makes, on this machine.
func (r *redisServer) roundTripP50(n int) time.Duration {
	script := redis.NewScript("return 1")
	lat := make([]time.Duration, 0, n)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		began := time.Now()
		err := script.Run(ctx, r.client, []string{"bench:rt"}).Err()
		cancel()
		if err != nil {
			return 0
		}
		lat = append(lat, time.Since(began))
	}
	slices.Sort(lat)
	return percentile(lat, 0.5)
}

// scriptStats are the server's counters of EVALSHA and EVAL: every store
// step is one script, so calls are the gateway's round trips (commands the
// scripts run inside Redis are not round trips), and usec the time Redis
// spent executing them.
type scriptStats struct{ calls, usec int64 }

func (r *redisServer) scriptStats() (scriptStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := r.client.Info(ctx, "commandstats").Result()
	if err != nil {
		return scriptStats{}, err
	}
	return parseScriptStats(s), nil
}

// parseScriptStats sums cmdstat_evalsha and cmdstat_eval of INFO
// commandstats ("cmdstat_evalsha:calls=2,usec=35,usec_per_call=17.50,...").
func parseScriptStats(info string) scriptStats {
	var st scriptStats
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			rest, ok = strings.CutPrefix(line, "cmdstat_eval:")
		}
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				st.calls += n
			case "usec":
				st.usec += n
			}
		}
	}
	return st
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
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	var ticks int64
	for _, x := range f[11:13] {
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
// with, and the miniredis version behind its embedded store.
func binaryVersions(path string) (goVersion, caddy, miniredis string) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "unknown", "unknown", "unknown"
	}
	goVersion, caddy, miniredis = bi.GoVersion, "unknown", "unknown"
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/caddyserver/caddy/v2":
			caddy = d.Version
		case "github.com/alicebob/miniredis/v2":
			miniredis = d.Version
		}
	}
	return goVersion, caddy, miniredis
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
