// Package pgtest starts throw-away PostgreSQL clusters for tests.
//
// Each cluster is made by initdb in a temporary directory of its own,
// listens on a free 127.0.0.1 port (and a Unix socket in its directory),
// trusts local connections as the user "idemgate", and is stopped and
// removed when the test ends. Postgres refuses to run as root: when the
// tests run as root, the cluster runs as the unprivileged "postgres"
// user (Debian's package creates it). When the binaries are not
// installed the calling test is skipped with a message saying so, unless
// IDEMGATE_REQUIRE_POSTGRES=1 is set, in which case it fails: CI sets it
// so that a missing package can never turn the Postgres tests into
// silent skips.
//
// Start one cluster per test package and give each test a database or
// a schema of its own (CreateDatabase), so `make test` stays short.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/proc"
)

// RequireEnv turns missing Postgres binaries from a skip into a failure
// when set to "1".
const RequireEnv = "IDEMGATE_REQUIRE_POSTGRES"

// BinDirEnv optionally names the directory of initdb and postgres.
const BinDirEnv = "IDEMGATE_POSTGRES_BIN"

// User is the database superuser of every test cluster.
const User = "idemgate"

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 20 * time.Second
	startTries   = 5
)

// BinDir returns the directory holding initdb, postgres and
// pg_basebackup: $BinDirEnv, the newest /usr/lib/postgresql/<version>/bin
// (Debian keeps them off PATH), or the directory of an initdb on PATH.
func BinDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			return "", err
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(dirs) > 0 {
		sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
		return filepath.Dir(dirs[0]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no initdb in /usr/lib/postgresql/*/bin or on PATH")
}

// version is the major version in /usr/lib/postgresql/<version>/bin/initdb.
func version(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// Available reports whether Start can run a cluster (without skipping).
func Available() bool {
	_, err := BinDir()
	return err == nil
}

// Required reports whether IDEMGATE_REQUIRE_POSTGRES=1 is set.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Cluster is one running (or stopped) PostgreSQL cluster.
type Cluster struct {
	// Addr is "127.0.0.1:PORT"; Port stays the same across Stop and
	// Restart.
	Addr string
	Port int
	// Dir holds the data directory (Dir/data) and the socket.
	Dir string

	bin   string
	cred  *syscall.Credential // nil: run as this process's user
	extra []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
	log  string        // the server's output
}

// Start runs a new cluster (postgres with extra "-c name=value" settings
// as args) and stops it and removes its files in t.Cleanup. It skips, or
// fails under IDEMGATE_REQUIRE_POSTGRES=1, when the binaries are missing.
func Start(t testing.TB, settings ...string) *Cluster {
	t.Helper()
	c, err := Launch(binDir(t), settings...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Remove)
	return c
}

// binDir returns BinDir, or skips t (fails it under
// IDEMGATE_REQUIRE_POSTGRES=1) when there is none.
func binDir(t testing.TB) string {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		msg := fmt.Sprintf("postgres not available (%v): install Debian's postgresql package, or point %s at its bin directory", err, BinDirEnv)
		if Required() {
			t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
		}
		t.Skipf("%s; set %s=1 to make this a failure", msg, RequireEnv)
	}
	return bin
}

// Launch makes and starts a cluster with the binaries in bin, for a
// program rather than a test; the caller ends it with Remove.
func Launch(bin string, settings ...string) (*Cluster, error) {
	c := &Cluster{bin: bin, extra: settings}
	var err error
	if c.Dir, err = os.MkdirTemp("", "idemgate-pg-"); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := c.runAsPostgres(); err != nil {
			c.Remove()
			return nil, err
		}
	}
	if err := c.initdb(); err != nil {
		c.Remove()
		return nil, err
	}
	if err := c.startOnFreePort(); err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// startOnFreePort starts the server on a free port, trying another when
// the one it drew was taken meanwhile.
func (c *Cluster) startOnFreePort() error {
	var lastErr error
	for range startTries {
		port, err := proc.FreePort()
		if err != nil {
			return fmt.Errorf("pgtest: no free port: %w", err)
		}
		c.Port = port
		c.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if lastErr = c.start(); lastErr == nil {
			return nil
		}
	}
	return fmt.Errorf("pgtest: postgres did not start: %w", lastErr)
}

// runAsPostgres makes the cluster run as the "postgres" user, which owns
// its directory: postgres refuses to run as root.
func (c *Cluster) runAsPostgres() error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("pgtest: running as root, and postgres refuses to: no user \"postgres\" to run it as (%w)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return os.Chown(c.Dir, uid, gid)
}

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	return cmd
}

func (c *Cluster) initdb() error {
	out, err := c.command("initdb", "-D", c.data(), "-U", User, "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	return nil
}

func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

// start runs postgres on c.Port and waits until it accepts connections.
func (c *Cluster) start() error {
	args := []string{"-D", c.data(), "-p", strconv.Itoa(c.Port), "-k", c.Dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300",
		"-c", "shared_buffers=32MB", "-c", "fsync=off", "-c", "full_page_writes=off"}
	for _, s := range c.extra {
		args = append(args, "-c", s)
	}
	cmd := c.command("postgres", args...)
	c.log = filepath.Join(c.Dir, "postgres.log")
	out, err := os.Create(c.log)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(done)
	}()
	exited := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			c.mu.Lock()
			c.cmd, c.done = cmd, done
			c.mu.Unlock()
			return nil
		}
		if exited() || ctx.Err() != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return fmt.Errorf("postgres on %s: %w\n%s", c.Addr, err, tail(c.log, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is the connection string of database db.
func (c *Cluster) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(User), Host: c.Addr, Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

var dbSeq atomic.Int64

// CreateDatabase creates a new, empty database and returns its URL.
func (c *Cluster) CreateDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d", dbSeq.Add(1))
	c.Exec(t, "CREATE DATABASE "+name)
	return c.URL(name)
}

// connect opens a connection to the database "postgres", closed when t
// ends, and a context that bounds its use to 60s.
func (c *Cluster) connect(t testing.TB) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		cancel()
		t.Fatalf("pgtest: connect to %s: %v", c.Addr, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()); cancel() })
	return ctx, conn
}

// Exec runs sql in the database "postgres".
func (c *Cluster) Exec(t testing.TB, sql string) {
	t.Helper()
	ctx, conn := c.connect(t)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", strings.Fields(sql)[0], err)
	}
}

// Running reports whether the server process runs.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Pid returns the server's (postmaster's) process id, 0 when it does not
// run.
func (c *Cluster) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Children returns the process ids of the server's backends and
// auxiliary processes (the postmaster's children) as they are now.
func (c *Cluster) Children() []int {
	if pid := c.Pid(); pid != 0 {
		return children(pid)
	}
	return nil
}

// children are the processes whose parent is pid (from /proc).
func children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := strings.LastIndex(string(b), ") ")
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b)[i+2:])
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == pid {
			k, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			kids = append(kids, k)
		}
	}
	return kids
}

// tail returns the last n lines of file, for error messages.
func tail(file string, n int) string {
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop shuts the server down fast (SIGINT: sessions are cut, the data is
// checkpointed). Safe to call more than once.
func (c *Cluster) Stop() { c.end(false) }

// Kill ends the server and its backends with SIGKILL, as a crash would.
func (c *Cluster) Kill() { c.end(true) }

func (c *Cluster) end(kill bool) {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.cmd, c.done = nil, nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	pid := cmd.Process.Pid
	if kill {
		// Each backend is a process group of its own: kill them all,
		// and wait until they are gone, since a new server refuses to
		// start while one still holds the shared memory.
		kids := children(pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
		<-done
		for _, k := range kids {
			for i := 0; i < 500 && syscall.Kill(k, 0) == nil; i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
		return
	}
	pgid := -pid
	_ = syscall.Kill(pgid, syscall.SIGINT) // fast shutdown
	select {
	case <-done:
	case <-time.After(stopTimeout):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-done
	}
}

// Restart starts a stopped or killed server again on the same port.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.end(false)
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
}

// Remove stops the server and removes its files.
func (c *Cluster) Remove() {
	c.Stop()
	_ = os.RemoveAll(c.Dir)
}

// The cluster a test package shares (Shared), ended by StopShared.
var shared struct {
	mu  sync.Mutex
	c   *Cluster
	err error
}

// Shared returns the test package's one cluster, started by the first
// caller; each test makes its own database in it (CreateDatabase). It
// skips or fails like Start when the binaries are missing. The package's
// TestMain calls StopShared after the tests.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	bin := binDir(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c == nil && shared.err == nil {
		shared.c, shared.err = Launch(bin)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// StopShared stops and removes the shared cluster, if one was started.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c != nil {
		shared.c.Remove()
		shared.c = nil
	}
}

// StartStandby makes a streaming standby of primary (pg_basebackup -R,
// with the replication slot-free defaults) and starts it on a port of
// its own; it is stopped and removed in t.Cleanup. Promote makes it the
// primary. The primary must run with wal_level=replica (the default) and
// allows replication from 127.0.0.1 (initdb's pg_hba.conf does, trusted).
func StartStandby(t testing.TB, primary *Cluster, settings ...string) *Cluster {
	t.Helper()
	c := &Cluster{bin: primary.bin, extra: settings}
	var err error
	if c.Dir, err = os.MkdirTemp("", "idemgate-pg-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Remove)
	if os.Geteuid() == 0 {
		if err := c.runAsPostgres(); err != nil {
			t.Fatal(err)
		}
	}
	out, err := c.command("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", User,
		"-D", c.data(), "-R", "-X", "stream", "--no-sync", "-c", "fast").CombinedOutput()
	if err != nil {
		t.Fatalf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	if err := c.startOnFreePort(); err != nil {
		t.Fatalf("pgtest: the standby: %v", err)
	}
	return c
}

// Promote makes a standby the primary and waits until it accepts writes.
func (c *Cluster) Promote(t testing.TB) {
	t.Helper()
	ctx, conn := c.connect(t)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil || !ok {
		t.Fatalf("pgtest: pg_promote: %v, %v", ok, err)
	}
}

// WaitStreaming waits until a standby streams from c with sync_state
// state ("sync" or "async" in pg_stat_replication).
func (c *Cluster) WaitStreaming(t testing.TB, state string) {
	t.Helper()
	ctx, conn := c.connect(t)
	for {
		var got string
		err := conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming' LIMIT 1").Scan(&got)
		if err == nil && got == state {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pgtest: no standby streaming with sync_state %s within 30s (last: %q, %v)", state, got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Bouncer is a PgBouncer in front of a cluster.
type Bouncer struct {
	Addr string
	Port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPgBouncer runs pgbouncer in front of c on a free 127.0.0.1 port,
// pooling in mode ("transaction" or "session"), every client taken as
// the cluster's user; it is stopped in t.Cleanup. It skips (fails under
// IDEMGATE_REQUIRE_POSTGRES=1) when pgbouncer is not installed.
func StartPgBouncer(t testing.TB, c *Cluster, mode string) *Bouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer" // Debian's, off a user's PATH
		if _, err := os.Stat(bin); err != nil {
			msg := "pgbouncer not available: install Debian's pgbouncer package"
			if Required() {
				t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
			}
			t.Skipf("%s; set %s=1 to make this a failure", msg, RequireEnv)
		}
	}
	b := &Bouncer{}
	if b.dir, err = os.MkdirTemp("", "idemgate-pgbouncer-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.stop(); _ = os.RemoveAll(b.dir) })
	if c.cred != nil {
		_ = os.Chown(b.dir, int(c.cred.Uid), int(c.cred.Gid))
	}
	for range startTries {
		if b.Port, err = proc.FreePort(); err != nil {
			t.Fatal(err)
		}
		b.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port))
		ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d user=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = %s
max_client_conn = 500
default_pool_size = 20
logfile = %s
pidfile = %s
`, c.Port, User, b.Port, mode, filepath.Join(b.dir, "pgbouncer.log"), filepath.Join(b.dir, "pgbouncer.pid"))
		conf := filepath.Join(b.dir, "pgbouncer.ini")
		if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, conf)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatalf("pgtest: start pgbouncer: %v", err)
		}
		b.cmd, b.done = cmd, make(chan struct{})
		go func() { _ = cmd.Wait(); close(b.done) }()
		if err = b.wait(); err == nil {
			return b
		}
		b.stop()
	}
	t.Fatalf("pgtest: pgbouncer did not start: %v\n%s", err, tail(filepath.Join(b.dir, "pgbouncer.log"), 20))
	return nil
}

// wait waits until the bouncer answers a query.
func (b *Bouncer) wait() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, b.URL("postgres")+"&default_query_exec_mode=exec")
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-b.done:
			return fmt.Errorf("pgbouncer exited: %w", err)
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL is the connection string of database db through the bouncer.
func (b *Bouncer) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(User), Host: b.Addr, Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

func (b *Bouncer) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-b.done:
	case <-time.After(stopTimeout):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	b.cmd = nil
}
