// Package e2e runs the real bin/idemgate binary in front of real upstreams,
// on the embedded store and on a real redis-server.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// binary is the gateway under test: $IDEMGATE_BIN (make test sets it) or a
// build of ./cmd/idemgate made once for this test run.
var binary string

func TestMain(m *testing.M) {
	code := func() int {
		binary = os.Getenv("IDEMGATE_BIN")
		if binary == "" {
			dir, err := os.MkdirTemp("", "idemgate-e2e")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			binary = filepath.Join(dir, "idemgate")
			build := exec.Command("go", "build", "-tags", "nobadger,nomysql,nopgx", "-o", binary, "github.com/idemgate/idemgate/cmd/idemgate")
			build.Stdout, build.Stderr = os.Stdout, os.Stderr
			if err := build.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "building the gateway:", err)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// freePort returns a free TCP port on 127.0.0.1.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// backend is a record store the gateway can use.
type backend struct {
	name  string
	store func(t *testing.T) string // the Caddyfile `store` arguments
}

// backends are the stores every behaviour test runs against.
var backends = []backend{
	{"embedded", func(*testing.T) string { return "embedded" }},
	{"redis", func(t *testing.T) string {
		srv := redistest.Start(t)
		return "redis://" + srv.Addr + "/0"
	}},
}

// gateway is one running bin/idemgate process.
type gateway struct {
	t         testing.TB
	dir       string
	url       string // http://127.0.0.1:port
	admin     string
	cmd       *exec.Cmd
	logs      *syncBuffer
	exited    chan struct{}
	caddyfile string
}

type gatewayConfig struct {
	store    string // Caddyfile store arguments
	upstream string // host:port
	rules    string // routes.yaml contents
	extra    string // more lines inside the idempotency block
	proxy    string // lines inside the reverse_proxy block
	global   string // more lines inside the global options block
}

// startGateway writes a Caddyfile and routes.yaml to a temp dir and runs
// the gateway until the test ends.
func startGateway(t testing.TB, cfg gatewayConfig) *gateway {
	t.Helper()
	g := writeGateway(t, cfg)
	g.start()
	t.Cleanup(g.stop)
	return g
}

// writeGateway writes a gateway's Caddyfile and routes.yaml to a temp dir
// without starting it. A store of "embedded" gets a directory of its own
// there (DIR), which restarts keep.
func writeGateway(t testing.TB, cfg gatewayConfig) *gateway {
	t.Helper()
	dir := t.TempDir()
	if cfg.store == "embedded" {
		cfg.store = "embedded " + filepath.Join(dir, "store")
	}
	port, adminPort := freePort(t), freePort(t)
	g := &gateway{
		t:     t,
		dir:   dir,
		url:   fmt.Sprintf("http://127.0.0.1:%d", port),
		admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		logs:  new(syncBuffer),
	}
	if err := os.WriteFile(filepath.Join(dir, "routes.yaml"), []byte(cfg.rules), 0o644); err != nil {
		t.Fatal(err)
	}
	g.caddyfile = filepath.Join(dir, "Caddyfile")
	caddyfile := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	%s
}

:%d {
	idempotency {
		rules routes.yaml
		store %s
		%s
	}
	reverse_proxy %s {
		%s
	}
}
`, adminPort, cfg.global, port, cfg.store, cfg.extra, cfg.upstream, cfg.proxy)
	if err := os.WriteFile(g.caddyfile, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *gateway) start() {
	g.t.Helper()
	g.cmd = exec.Command(binary, "run", "--config", g.caddyfile, "--adapter", "caddyfile")
	g.cmd.Dir = g.dir
	g.cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+g.dir, "XDG_CONFIG_HOME="+g.dir, "HOME="+g.dir)
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	if err := g.cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.exited = make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(g.exited) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(g.admin + "/config/")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-g.exited:
			g.t.Fatalf("gateway exited at start:\n%s", g.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("gateway did not start in 20s:\n%s", g.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends the gateway with SIGKILL, as a crash would.
func (g *gateway) kill() {
	if g.cmd == nil || g.cmd.Process == nil {
		return
	}
	_ = g.cmd.Process.Kill()
	<-g.exited
}

// restart starts the gateway again with the same Caddyfile (after kill or
// stop), on the same ports.
func (g *gateway) restart() {
	g.t.Helper()
	select {
	case <-g.exited:
	default:
		g.stop()
	}
	g.start()
}

func (g *gateway) stop() {
	if g.cmd == nil || g.cmd.Process == nil {
		return
	}
	select {
	case <-g.exited:
	default:
		_ = g.cmd.Process.Signal(os.Interrupt)
		select {
		case <-g.exited:
		case <-time.After(10 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.exited
		}
	}
	if g.t.Failed() {
		g.t.Logf("gateway log:\n%s", g.logs.String())
	}
}

// reload re-runs `idemgate reload` with the gateway's Caddyfile.
func (g *gateway) reload() (string, error) {
	cmd := exec.Command(binary, "reload", "--config", g.caddyfile, "--adapter", "caddyfile", "--address", strings.TrimPrefix(g.admin, "http://"))
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+g.dir, "XDG_CONFIG_HOME="+g.dir, "HOME="+g.dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// response is what a client saw.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) problem(t testing.TB) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (status %d, body %s)", ct, r.status, r.body)
	}
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, r.body)
	}
	for _, field := range []string{"type", "title", "status", "detail"} {
		if _, ok := p[field]; !ok {
			t.Errorf("problem has no %q: %s", field, r.body)
		}
	}
	if int(p["status"].(float64)) != r.status {
		t.Errorf("problem status %v, HTTP status %d", p["status"], r.status)
	}
	return p
}

var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}

// send makes one request; headers alternate name, value.
func send(t testing.TB, method, url string, body []byte, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body = http.NoBody
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}
