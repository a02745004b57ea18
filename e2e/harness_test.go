// Package e2e runs the real bin/idemgate binary in front of real upstreams,
// on the embedded store and on a real redis-server.
package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/proc"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
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
		defer pgtest.StopShared()
		return m.Run()
	}()
	os.Exit(code)
}

// freePort returns a free TCP port on 127.0.0.1 (proc.FreePort).
func freePort(t testing.TB) int {
	t.Helper()
	p, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Stores and gateways.

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
	{"postgres", func(t *testing.T) string { return pgtest.Shared(t).CreateDatabase(t) }},
}

// dealsAndHeldRoutes are two routes.yaml route entries: deals (POST /deals
// answers 201 with an id) and held (/status/500, whose call fails).
const dealsAndHeldRoutes = `  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
  - name: held
    match: { path: /status/500 }
    key: ["{header.Idempotency-Key}"]
`

// forEachBackend runs fn as a subtest, named for the backend, on every
// backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, be backend)) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { fn(t, be) })
	}
}

// gateway is one running bin/idemgate process.
type gateway struct {
	t         testing.TB
	dir       string
	port      int
	adminPort int
	url       string // http://127.0.0.1:port
	admin     string
	cmd       *exec.Cmd
	logs      *syncBuffer
	exited    chan struct{}
	caddyfile string
	env       []string // more environment variables, NAME=value
}

type gatewayConfig struct {
	store    string   // Caddyfile store arguments
	upstream string   // host:port
	rules    string   // routes.yaml contents
	extra    string   // more lines inside the idempotency block
	proxy    string   // lines inside the reverse_proxy block
	global   string   // more lines inside the global options block
	sites    string   // more site blocks after the gateway's
	env      []string // more environment variables of the gateway process, NAME=value
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
	g := newGateway(t)
	g.env = cfg.env
	if cfg.store == "embedded" {
		cfg.store = "embedded " + filepath.Join(g.dir, "store")
	}
	if err := os.WriteFile(filepath.Join(g.dir, "routes.yaml"), []byte(cfg.rules), 0o644); err != nil {
		t.Fatal(err)
	}
	caddyfile := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	default_bind 127.0.0.1
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
%s
`, g.adminPort, cfg.global, g.port, cfg.store, cfg.extra, cfg.upstream, cfg.proxy, cfg.sites)
	if err := os.WriteFile(g.caddyfile, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

// newGateway picks a temp dir and free ports for a gateway whose
// Caddyfile the caller writes to g.caddyfile.
func newGateway(t testing.TB) *gateway {
	t.Helper()
	dir := t.TempDir()
	port, adminPort := freePort(t), freePort(t)
	return &gateway{
		t:         t,
		dir:       dir,
		port:      port,
		adminPort: adminPort,
		url:       fmt.Sprintf("http://127.0.0.1:%d", port),
		admin:     fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		logs:      new(syncBuffer),
		caddyfile: filepath.Join(dir, "Caddyfile"),
	}
}

// command is `idemgate args...` run in the gateway's dir, with its dir as
// home.
func (g *gateway) command(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+g.dir, "XDG_CONFIG_HOME="+g.dir, "HOME="+g.dir)
	cmd.Env = append(cmd.Env, g.env...)
	return cmd
}

// run starts `idemgate run` on the gateway's Caddyfile, logging to g.logs.
func (g *gateway) run() {
	g.t.Helper()
	g.cmd = g.command("run", "--config", g.caddyfile, "--adapter", "caddyfile")
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	if err := g.cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
}

func (g *gateway) start() {
	g.t.Helper()
	g.run()
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

// reload re-runs `idemgate reload` with the gateway's Caddyfile. The
// reload closes the old config's idle connections: the shared client
// drops its own, so that the next request cannot pick one the gateway is
// closing (a POST on it fails with EOF and is not retried).
func (g *gateway) reload() (string, error) {
	cmd := g.command("reload", "--config", g.caddyfile, "--adapter", "caddyfile", "--address", strings.TrimPrefix(g.admin, "http://"))
	out, err := cmd.CombinedOutput()
	client.CloseIdleConnections()
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

// Requests and answers.

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

// kind is the fragment of the problem type the body names
// ("outcome-unknown"), or "" when the body names none.
func (r response) kind() string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(r.body, &p) != nil {
		return ""
	}
	_, kind, _ := strings.Cut(p.Type, "#")
	return kind
}

// isProblem reports whether r is a problem of the given type (the
// anchor of its type URL) for record id ("" = any record).
func isProblem(t testing.TB, r response, status int, kind, id string) bool {
	t.Helper()
	if r.status != status || r.header.Get("Content-Type") != "application/problem+json" {
		return false
	}
	p := r.problem(t)
	typ, _ := p["type"].(string)
	if !strings.HasSuffix(typ, "#"+kind) {
		return false
	}
	if id != "" && p["record_id"] != id {
		t.Errorf("%s problem names record %v, want %s", kind, p["record_id"], id)
	}
	return true
}

var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}

// do makes one request through c; headers alternate name, value. It
// calls no t, so any goroutine may use it; a read error comes with what
// was read.
func do(c *http.Client, method, url string, body []byte, headers ...string) (response, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	if body == nil {
		req.Body = http.NoBody
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// send makes one request from the test goroutine; headers alternate name,
// value.
func send(t testing.TB, method, url string, body []byte, headers ...string) response {
	t.Helper()
	r, err := do(client, method, url, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

// Record ids.

// e2eSecret is the deployment secret of the gateways whose tests compute
// record ids themselves (the `secret` store option).
const e2eSecret = "e2e-deployment-secret-0123456789"

// withSecret adds the e2e secret to a gateway's idempotency block lines.
func withSecret(extra string) string { return extra + "\n\t\tsecret " + e2eSecret }

var e2eIDs = func() *keying.IDKey {
	k, err := keying.NewIDKey([]byte(e2eSecret))
	if err != nil {
		panic(err)
	}
	return k
}()

// defaultScope is the routes' default scope.
var defaultScope = []keying.Template{keying.MustParseTemplate("{header.Authorization}")}

// recordID is the record id a gateway configured withSecret gives key on
// route (the route name is its operation) for a request whose
// Authorization header is auth ("" for none).
func recordID(route, auth, key string) string {
	h := http.Header{}
	if auth != "" {
		h.Set("Authorization", auth)
	}
	in := keying.NewInput(http.MethodPost, h, "", nil)
	return e2eIDs.KeyID(route, keying.ScopeHash(defaultScope, in), key)
}

// Admin client.

// adminRecord is a record as the operator API shows it.
type adminRecord struct {
	ID          string      `json:"id"`
	Route       string      `json:"route"`
	Operation   string      `json:"operation"`
	State       store.State `json:"state"`
	Attempts    int64       `json:"attempts"`
	Executions  int64       `json:"executions"`
	StartedAt   time.Time   `json:"started_at"`
	CompletedAt time.Time   `json:"completed_at"`
	LeaseUntil  time.Time   `json:"lease_until"`
	Status      int         `json:"status"`
	ExternalID  string      `json:"external_id"`
	Digest      string      `json:"digest"`
	Reason      string      `json:"reason"`
	BodyOmitted bool        `json:"body_omitted"`
	Headers     http.Header `json:"headers"`
	Body        *string     `json:"body"`
	BodyBase64  string      `json:"body_base64"`
	Audit       []struct {
		Actor  string `json:"actor"`
		Action string `json:"action"`
		Reason string `json:"reason"`
	} `json:"audit"`
	Verification *struct {
		Method string `json:"method"`
		URL    string `json:"url"`
		Checks []struct {
			At      time.Time `json:"at"`
			Status  int       `json:"status"`
			Verdict string    `json:"verdict"`
		} `json:"checks"`
		CheckCount     int64     `json:"check_count"`
		NextCheck      time.Time `json:"next_check"`
		NotFoundStreak int64     `json:"not_found_streak"`
	} `json:"verification"`
}

// adminCall calls the gateway's admin endpoint and returns status and
// body. POSTs are sent as application/json, the only type the API accepts.
func adminCall(t testing.TB, gw *gateway, method, path, body string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, gw.admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}

// adminDo is adminCall for an answer that must be application/json.
func adminDo(t testing.TB, gw *gateway, method, path, body string) (int, []byte) {
	t.Helper()
	code, b, h := adminCall(t, gw, method, path, body)
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q (%d %s)", method, path, ct, code, b)
	}
	return code, b
}

// adminJSON expects 200 and decodes the answer into v.
func adminJSON(t testing.TB, gw *gateway, method, path, body string, v any) {
	t.Helper()
	code, b := adminDo(t, gw, method, path, body)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, b)
	}
}

// adminError expects an error status and returns the message of Caddy's
// JSON error body.
func adminError(t testing.TB, gw *gateway, method, path, body string, status int) string {
	t.Helper()
	code, b := adminDo(t, gw, method, path, body)
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || code != status || e.Error == "" {
		t.Errorf("%s %s %s: %d %s, want %d with an error message", method, path, body, code, b, status)
	}
	return e.Error
}

// adminList walks every page of GET /idempotency/records?query.
func adminList(t testing.TB, gw *gateway, query string, limit int) []adminRecord {
	t.Helper()
	var all []adminRecord
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("the listing does not end")
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit))
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Records    []adminRecord `json:"records"`
			NextCursor *string       `json:"next_cursor"`
		}
		adminJSON(t, gw, "GET", "/idempotency/records?"+q.Encode(), "", &page)
		if page.Records == nil || page.NextCursor == nil {
			t.Fatalf("listing without records or next_cursor")
		}
		if limit > 0 && len(page.Records) > limit {
			t.Fatalf("page of %d records, limit %d", len(page.Records), limit)
		}
		all = append(all, page.Records...)
		if *page.NextCursor == "" {
			return all
		}
		cursor = *page.NextCursor
	}
}

// adminRoutes returns the sorted route names of recs.
func adminRoutes(recs []adminRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Route
	}
	slices.Sort(out)
	return out
}

// adminOnly returns the one record of route.
func adminOnly(t testing.TB, gw *gateway, route string) adminRecord {
	t.Helper()
	recs := adminList(t, gw, "route="+route, 0)
	if len(recs) != 1 {
		t.Fatalf("route %s: %d records, want 1", route, len(recs))
	}
	return recs[0]
}

// adminHeldID returns the record id named by the 409 "outcome unknown"
// answer to a retry of key.
func adminHeldID(t testing.TB, gw *gateway, path, key string) string {
	t.Helper()
	r := send(t, "POST", gw.url+path, []byte(`{}`), "Idempotency-Key", key)
	id := heldID(t, r, "retry of held key "+key)
	if r.kind() != "outcome-unknown" {
		t.Fatalf("retry of held key %s: %s, want outcome-unknown with a record id", key, r.body)
	}
	return id
}

// heldID is the record id a 409 answer names; what says which request.
func heldID(t testing.TB, r response, what string) string {
	t.Helper()
	if r.status != http.StatusConflict {
		t.Fatalf("%s: %d %s, want 409 outcome unknown", what, r.status, r.body)
	}
	id, _ := r.problem(t)["record_id"].(string)
	if len(id) != 32 {
		t.Fatalf("%s: 409 names no record: %s", what, r.body)
	}
	return id
}

// adminPost calls an operator endpoint with a JSON body.
func adminPost(t testing.TB, gw *gateway, path, body string) (int, []byte) {
	t.Helper()
	code, b, _ := adminCall(t, gw, http.MethodPost, path, body)
	return code, b
}

// Metrics.

// metricsText scrapes the gateway's admin /metrics.
func metricsText(t testing.TB, gw *gateway) string {
	t.Helper()
	resp, err := client.Get(gw.admin + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// metric returns the value of the sample of name whose labels
// include every one of labels (`route="deals"`), or 0 when there is none.
// A metric without labels is asked for with none.
func metric(t testing.TB, gw *gateway, name string, labels ...string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, gw), "\n") {
		if !strings.HasPrefix(line, name+"{") && (len(labels) > 0 || !strings.HasPrefix(line, name+" ")) {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		return v
	}
	return 0
}

// Upstreams.

// upstream is an API that knows nothing about idempotency: it counts every
// call it gets, so a test can see how often a side effect ran.
type upstream struct {
	fake
	calls counter // by path
	gates gates   // by path

	mu      sync.Mutex
	keys    map[string]string // forwarded Idempotency-Key by path (last seen)
	lengths map[string]int64  // Content-Length seen, by path
}

// bigBody is the deterministic 3 MiB body of /big.
var bigBody = func() []byte {
	b := make([]byte, 3<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// binaryBody is not valid UTF-8, served as text.
var binaryBody = []byte{0xff, 0xfe, 0x00, 'o', 'k', 0x80, 0xc3, 0x28, '\n', 0x00, 0x01}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{
		keys:    map[string]string{},
		lengths: map[string]int64{},
	}
	u.fake = startFake(t, u.serve)
	return u
}

// forwardedKey is the key the gateway forwards in Idempotency-Key, read
// as an upstream that follows the IETF Idempotency-Key draft reads it: a
// Structured Field string ("evt_184"); a bare value is taken as it is.
func forwardedKey(r *http.Request) string {
	return keying.ParseKeyHeader(r.Header.Get("Idempotency-Key"))
}

func (u *upstream) count(path string) int { return u.calls.count(path) }

func (u *upstream) seenKey(path string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.keys[path]
}

// gate makes calls to path wait until the returned func is called.
func (u *upstream) gate(path string) (open func()) { return u.gates.gate(path) }

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	n, _ := u.calls.add(r.URL.Path)
	u.mu.Lock()
	u.keys[r.URL.Path] = r.Header.Get("Idempotency-Key")
	u.lengths[r.URL.Path] = r.ContentLength
	u.mu.Unlock()
	u.gates.wait(r.URL.Path, nil, 20*time.Second)
	sum := sha256.Sum256(body)
	switch {
	case strings.HasPrefix(r.URL.Path, "/status/"):
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d, call %d\n", code, n)
	case r.URL.Path == "/binary":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(binaryBody)
	case r.URL.Path == "/big":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(bigBody)
	default:
		id := fmt.Sprintf("D-%d", 9020+n)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/deals/"+id)
		w.Header().Add("Set-Cookie", "session=abc; Path=/")
		w.Header().Add("Set-Cookie", "deal="+id+"; Path=/")
		w.Header().Set("X-Upstream-Call", strconv.Itoa(n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"call":%d,"body_sha256":%q,"content_length":%d}`, id, n, hex.EncodeToString(sum[:]), r.ContentLength)
	}
}

// fake is an upstream on 127.0.0.1 that runs until the test ends.
type fake struct {
	srv *httptest.Server
}

func startFake(t testing.TB, h http.HandlerFunc) fake {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return fake{srv: srv}
}

// addr is the upstream's host:port.
func (f fake) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

// counter counts an upstream's calls by key (an Idempotency-Key or a path).
type counter struct {
	mu    sync.Mutex
	calls map[string]int
	total int
}

// add counts one call for key and returns the calls for key and in all.
func (c *counter) add(key string) (n, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[key]++
	c.total++
	return c.calls[key], c.total
}

// count is how often key was called.
func (c *counter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key]
}

// sum is how many calls came for every key.
func (c *counter) sum() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// gates hold an upstream's calls for a key until the test opens them.
type gates struct {
	mu      sync.Mutex
	held    map[string]chan struct{}
	arrived map[string]chan struct{}
}

// gate makes calls for key wait until open is called.
func (g *gates) gate(key string) (open func()) {
	_, open = g.hold(key)
	return open
}

// hold is gate that also says, by closing arrived, when the next call for
// key has reached the gate.
func (g *gates) hold(key string) (arrived <-chan struct{}, open func()) {
	ch, a := make(chan struct{}), make(chan struct{})
	g.mu.Lock()
	if g.held == nil {
		g.held, g.arrived = map[string]chan struct{}{}, map[string]chan struct{}{}
	}
	g.held[key], g.arrived[key] = ch, a
	g.mu.Unlock()
	var once sync.Once
	return a, func() { once.Do(func() { close(ch) }) }
}

// wait holds a call for key while its gate is closed, until done closes or
// for at most limit; it reports whether key had a gate.
func (g *gates) wait(key string, done <-chan struct{}, limit time.Duration) bool {
	g.mu.Lock()
	ch, a := g.held[key], g.arrived[key]
	delete(g.arrived, key)
	g.mu.Unlock()
	if ch == nil {
		return false
	}
	if a != nil {
		close(a)
	}
	select {
	case <-ch:
	case <-done:
	case <-time.After(limit):
	}
	return true
}

// openAll opens every gate and forgets them.
func (g *gates) openAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ch := range g.held {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	g.held, g.arrived = nil, nil
}

// Concurrency.

// together runs fn(0) to fn(n-1) in n goroutines released at once and
// returns when all have returned.
func together(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

// background runs fn(w, i) on workers goroutines, calls 0 to limit-1 on
// each with pause after every call, until stop; stop returns when every
// worker has.
func background(workers, limit int, pause time.Duration, fn func(w, i int)) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < limit; i++ {
				select {
				case <-done:
					return
				default:
				}
				fn(w, i)
				time.Sleep(pause)
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// pick returns a random element of *s, read under mu, or the zero value
// when there is none.
func pick[T any](mu *sync.Mutex, s *[]T, r *rand.Rand) T {
	mu.Lock()
	defer mu.Unlock()
	var zero T
	if len(*s) == 0 {
		return zero
	}
	return (*s)[r.IntN(len(*s))]
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached in 10s")
}
