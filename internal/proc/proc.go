// Package proc runs the helper processes that the demo and the load
// benchmark start (the gateway, the example CRM, upstreams): each with its
// output in a log file, stopped with SIGTERM and, after 10s, SIGKILL.
package proc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a started child process.
type Process struct {
	// Name names it in messages ("gateway", "crm").
	Name   string
	cmd    *exec.Cmd
	log    string // the file with its output
	exited chan struct{}
}

// Options say where a child logs and runs.
type Options struct {
	// LogDir receives NAME.log with the child's output.
	LogDir string
	// WorkDir is its working directory; "" keeps the caller's.
	WorkDir string
	// Env is added to the caller's environment.
	Env []string
}

// Start starts bin with args.
func Start(name string, o Options, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(o.LogDir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = o.WorkDir
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting the %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits up to 10s, then kills.
func (p *Process) Stop() {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Kill sends SIGKILL, as a crash would end the process, and waits for
// it to exit.
func (p *Process) Kill() {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Tail returns the last n lines of the child's log, for error messages.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ephemeralRange reads the range the kernel takes source ports (and port
// 0 binds) from.
func ephemeralRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	return lo, hi, err1 == nil && err2 == nil && lo <= hi
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that this process has not handed out before.
//
// Where the kernel says which range it takes source ports from, the port
// is drawn at random from below that range: a port from the range itself
// (what a bind to port 0 gives) can become the source port of any outgoing
// connection on the machine between the probe and the bind of the server
// it is meant for, which then fails with "address already in use".
func FreePort() (int, error) {
	if lo, _, ok := ephemeralRange(); ok && lo-portFloor >= 1000 {
		for range 200 {
			p := portFloor + rand.IntN(lo-portFloor)
			if handOut(p) && probe(p) == nil {
				return p, nil
			}
		}
	}
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if handOut(p) {
			return p, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1")
}

// portFloor is the lowest port FreePort draws: above the well-known
// services a machine may run.
const portFloor = 10000

var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// handOut records p as handed out, and reports whether it was not before.
func handOut(p int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[p] {
		return false
	}
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	handedOut.ports[p] = true
	return true
}

// probe binds p on 127.0.0.1 and lets it go.
func probe(p int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return err
	}
	return l.Close()
}
