// Package redistest starts throw-away redis-server processes for tests
// (Start and its relatives) and for the load benchmark (Launch).
//
// Each server listens on a free 127.0.0.1 port, keeps its files in the test's
// temporary directory, persists nothing (--save "" --appendonly no) and is
// stopped when the test ends. When redis-server is not installed the calling
// test is skipped with a message saying so, unless IDEMGATE_REQUIRE_REDIS=1 is
// set, in which case the test fails: CI sets it so that a missing package can
// never turn the Redis tests into silent skips.
package redistest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/proc"
	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that turns a missing redis-server
// from a skip into a test failure when set to "1".
const RequireEnv = "IDEMGATE_REQUIRE_REDIS"

// BinaryEnv optionally names the redis-server binary to run instead of the
// one found on PATH.
const BinaryEnv = "IDEMGATE_REDIS_SERVER"

const (
	startTimeout = 10 * time.Second
	stopTimeout  = 10 * time.Second
	startTries   = 5
)

// Binary returns the path of the redis-server binary that Start would run,
// or an error saying why there is none.
func Binary() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		return exec.LookPath(p)
	}
	return exec.LookPath("redis-server")
}

// Available reports whether Start can run a redis-server (without skipping).
func Available() bool {
	_, err := Binary()
	return err == nil
}

// Required reports whether IDEMGATE_REQUIRE_REDIS=1 is set.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Server is one running (or stopped) redis-server process.
type Server struct {
	// Addr is "127.0.0.1:PORT".
	Addr string
	// Port is the TCP port the server listens on; it stays the same across
	// Stop and Restart.
	Port int
	// Dir is the server's working directory (inside t.TempDir()).
	Dir string

	bin      string
	extra    []string
	sentinel string      // "" or the Sentinel config's monitor line
	tls      *tls.Config // non-nil: TLS only (see StartTLS), the client side
	busPort  int         // a cluster node's bus port, drawn like Port (redis' default, Port+10000, may be taken or in the ephemeral range)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// Start runs redis-server on a free 127.0.0.1 port in t.TempDir()
// (--save "" --appendonly no, plus extraArgs), waits until it answers PING
// and stops it in t.Cleanup. When redis-server is not available it calls
// t.Skip with a clear message, or t.Fatal when IDEMGATE_REQUIRE_REDIS=1.
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		msg := fmt.Sprintf("redis-server not available (%v): install Debian's redis-server package, "+
			"or point %s at the binary", err, BinaryEnv)
		if Required() {
			t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
		}
		t.Skipf("%s; set %s=1 to make this a failure", msg, RequireEnv)
	}
	s := &Server{Dir: t.TempDir(), bin: bin, extra: append([]string(nil), extraArgs...)}
	s.launch(t)
	return s
}

// Launch starts a redis-server like Start, for a program rather than a
// test (the load benchmark): in dir, which must exist, on a free
// 127.0.0.1 port (--save "" --appendonly no, plus extraArgs). It returns
// an error where Start would skip or fail; the caller stops the server
// with Stop.
func Launch(dir string, extraArgs ...string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, fmt.Errorf("redis-server not available: %w", err)
	}
	s := &Server{Dir: dir, bin: bin, extra: append([]string(nil), extraArgs...)}
	if err := s.tryLaunch(); err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts s on a free port, retrying on another port when the first
// was taken meanwhile, and stops it in t.Cleanup.
func (s *Server) launch(t testing.TB) {
	t.Helper()
	t.Cleanup(s.Stop)
	if err := s.tryLaunch(); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) tryLaunch() error {
	var lastErr error
	for range startTries {
		port, err := proc.FreePort()
		if err != nil {
			return fmt.Errorf("redistest: no free port: %w", err)
		}
		s.Port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if slices.Contains(s.extra, "--cluster-enabled") {
			if s.busPort, err = proc.FreePort(); err != nil {
				return fmt.Errorf("redistest: no free port: %w", err)
			}
		}
		if lastErr = s.start(); lastErr == nil {
			return nil
		}
		// Most likely somebody else took the port between our probe and
		// redis-server's bind: try another one.
	}
	return fmt.Errorf("redistest: redis-server did not start: %w", lastErr)
}

// Pid returns the server's process id, 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop sends SIGTERM to the server and waits for it to exit (SIGKILL after
// 10s). It is safe to call more than once; tests use it to simulate an
// outage.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Kill ends the server with SIGKILL, as a crash or a lost machine would:
// nothing is flushed, replicas are not waited for. It returns once the
// process has exited. Safe to call more than once, and before Stop.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts the server again on the same port (after Stop), with an
// empty data set.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	// The old socket may linger for a moment; redis-server sets SO_REUSEADDR,
	// so a retry or two is enough.
	for range startTries {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("redistest: restart on %s: %v", s.Addr, err)
}

// Client returns a go-redis client for the server, closed in t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := s.newClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) newClient() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  s.Addr,
		DialTimeout:           2 * time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		DialerRetries:         1, // a stopped server fails at once
		TLSConfig:             s.tls,
	})
}

// Running reports whether the server process is running (Start or Restart
// succeeded and Stop has not been called since).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

func (s *Server) start() error {
	logPath := filepath.Join(s.Dir, "redis.log")
	var args []string
	if s.sentinel != "" {
		// Sentinel needs a writable config file (it rewrites it).
		conf := filepath.Join(s.Dir, "sentinel.conf")
		if _, err := os.Stat(conf); err != nil {
			if err := os.WriteFile(conf, []byte(s.sentinel), 0o600); err != nil {
				return err
			}
		}
		args = []string{conf, "--sentinel"}
	} else {
		args = []string{"--save", "", "--appendonly", "no"}
	}
	if s.tls != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.Port))
		args = append(args, tlsArgs(s.Dir)...)
	} else {
		args = append(args, "--port", strconv.Itoa(s.Port))
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--dir", s.Dir,
		"--daemonize", "no",
		"--logfile", logPath,
	)
	if s.busPort != 0 {
		args = append(args, "--cluster-port", strconv.Itoa(s.busPort))
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.Dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server exited during start-up (%v); log:\n%s", cmd.ProcessState, tail(logPath))
		default:
		}
		pid, err := probe(s.Addr, s.tls)
		if err == nil && pid == cmd.Process.Pid {
			break
		}
		if err == nil {
			// Another redis-server answers on this port: ours will fail
			// to bind and exit.
			err = fmt.Errorf("port %d is served by another redis-server (pid %d)", s.Port, pid)
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("%s not ready within %v (%v); log:\n%s", s.Addr, startTimeout, err, tail(logPath))
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// probe asks the server at addr for its process id (INFO server), which
// proves both that it answers and that it is the process we started.
func probe(addr string, tlsConf *tls.Config) (int, error) {
	var c net.Conn
	var err error
	if tlsConf != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, tlsConf)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(head, "$") {
		return 0, errors.New("unexpected reply " + strconv.Quote(strings.TrimSpace(head)))
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 {
		return 0, errors.New("bad INFO reply header " + strconv.Quote(head))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// tail returns the last few lines of a log file for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
