// Package proc runs the helper processes that the demo and the load
// benchmark start (the gateway, the example CRM, upstreams): each with its
// output in a log file, stopped with SIGTERM and, after 10s, SIGKILL.
package proc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
