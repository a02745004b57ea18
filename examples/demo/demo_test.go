package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/proc"
)

func TestCheckFree(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	freeAddr := fmt.Sprintf("127.0.0.1:%d", mustFreePort(t))
	if err := checkFree([]string{freeAddr}); err != nil {
		t.Errorf("free port: %v", err)
	}
	err = checkFree([]string{freeAddr, held.Addr().String()})
	if err == nil {
		t.Fatal("a held port passed the check")
	}
	msg := checkPortsMessage("make run", err)
	for _, want := range []string{"make run: cannot start", held.Addr().String() + " is already in use", "make demo"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	// The port stays usable by its owner: the check only probed it.
	if _, err := net.Dial("tcp", held.Addr().String()); err != nil {
		t.Errorf("held port after the check: %v", err)
	}
}

// fakeCRM answers GET /stats like the example CRM, optionally through
// Caddy (a Via header).
func fakeCRM(via string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if via != "" {
			w.Header().Set("Via", via)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"deals_created":3,"requests":4}`)
	}
}

// fakeAdmin serves /config/apps/http/servers with one server.
func fakeAdmin(listen, handlers string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/config/apps/http/servers" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"srv0":{"listen":[%q],"routes":[{"handle":[%s]}]}}`, listen, handlers)
	}
}

func TestProbeRunning(t *testing.T) {
	client := &http.Client{Timeout: 5 * time.Second}
	const crm = "http://127.0.0.1:9001"
	gatewayHandlers := `{"handler":"idempotency","routes":[]},{"handler":"reverse_proxy","upstreams":[{"dial":"127.0.0.1:9001"}]}`

	closed := fmt.Sprintf("http://127.0.0.1:%d", mustFreePort(t))
	if ok, why := probeRunning(client, closed, closed, crm); ok || !strings.Contains(why, "nothing listens") {
		t.Errorf("closed port: %v, %q", ok, why)
	}

	direct := httptest.NewServer(fakeCRM(""))
	defer direct.Close()
	if ok, why := probeRunning(client, direct.URL, closed, crm); ok || !strings.Contains(why, "not through Caddy") {
		t.Errorf("CRM without Caddy: %v, %q", ok, why)
	}

	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	if ok, why := probeRunning(client, other.URL, closed, crm); ok || !strings.Contains(why, "not as a gateway") {
		t.Errorf("another server: %v, %q", ok, why)
	}

	proxied := httptest.NewServer(fakeCRM("1.1 Caddy"))
	defer proxied.Close()
	port := proxied.Listener.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		name, listen, handlers string
		ok                     bool
	}{
		{"gateway on the port", fmt.Sprintf(":%d", port), gatewayHandlers, true},
		{"gateway on another port", ":1", gatewayHandlers, false},
		{"plain reverse_proxy", fmt.Sprintf(":%d", port), `{"handler":"reverse_proxy","upstreams":[{"dial":"127.0.0.1:9001"}]}`, false},
		{"gateway to another CRM", fmt.Sprintf(":%d", port), strings.ReplaceAll(gatewayHandlers, "9001", "9002"), false},
	} {
		admin := httptest.NewServer(fakeAdmin(tc.listen, tc.handlers))
		ok, why := probeRunning(client, proxied.URL, admin.URL, crm)
		admin.Close()
		if ok != tc.ok {
			t.Errorf("%s: probeRunning = %v (%q), want %v", tc.name, ok, why, tc.ok)
		}
	}
	if ok, why := probeRunning(client, proxied.URL, closed, crm); ok || !strings.Contains(why, "admin API does not answer") {
		t.Errorf("no admin API: %v, %q", ok, why)
	}
}

// TestOwnGateway runs the demo's own gateway and CRM (the real binaries,
// IDEMGATE_BIN and the crm next to it, as `make test` builds them) while
// another listener holds a port, and counts the deals one event created,
// in both acts.
func TestOwnGateway(t *testing.T) {
	bin := os.Getenv("IDEMGATE_BIN")
	if bin == "" {
		t.Skip("IDEMGATE_BIN is not set (make test sets it)")
	}
	crmBin := filepath.Join(filepath.Dir(bin), "crm")
	if _, err := os.Stat(crmBin); err != nil {
		t.Skipf("no crm binary next to %s: %v", bin, err)
	}
	client := &http.Client{Timeout: 15 * time.Second}
	o, err := startOwn(client, bin, crmBin, "../webhook/routes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		o.stop()
		if _, err := os.Stat(o.dir); !os.IsNotExist(err) {
			t.Errorf("temporary directory %s left behind (%v)", o.dir, err)
		}
	}()
	if !strings.HasPrefix(o.gateway, "http://127.0.0.1:") || o.gateway == o.crm {
		t.Fatalf("gateway %s, crm %s", o.gateway, o.crm)
	}
	if err := run(client, o.gateway, o.crm, "evt_test"); err != nil {
		t.Fatalf("run: %v", err)
	}
	deals, _, err := getStats(client, o.crm)
	if err != nil || deals != 1 {
		t.Errorf("the CRM holds %d deals (%v), want 1", deals, err)
	}
	// The second act: the CRM's answer is dropped; the retry replays the
	// deal the gateway's verify rule found (actTwo checks both).
	if err := actTwo(client, o.gateway, o.crm, "evt_test_dropped"); err != nil {
		t.Fatalf("actTwo: %v", err)
	}
	if deals, _, err = getStats(client, o.crm); err != nil || deals != 2 {
		t.Errorf("the CRM holds %d deals after the second act (%v), want 2", deals, err)
	}
}

func mustFreePort(t *testing.T) int {
	t.Helper()
	p, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
