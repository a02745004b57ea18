package caddymodule

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store/embedded"
)

// TestMaxBufferedConfig: max_buffered is read from the Caddyfile as a
// size into the handler's JSON; left out it is 256MiB; below a route's
// max_body (whose largest bodies it could never admit) the config fails,
// naming the route.
func TestMaxBufferedConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "routes.yaml"), []byte("routes:\n  - name: big\n    match: { path: /a }\n    key: [\"{header.K}\"]\n    max_body: 8MiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(":8080 {\n idempotency {\n  rules routes.yaml\n  max_buffered 64MiB\n }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := adapt(t, file)
	if err != nil || !strings.Contains(string(out), `"max_buffered":67108864`) {
		t.Errorf("adapted: %v %s, want max_buffered 67108864", err, out)
	}

	rules, err := config.Parse("routes.yaml", []byte("routes:\n  - name: big\n    match: { path: /a }\n    key: [\"{header.K}\"]\n    max_body: 8MiB\n"), config.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		max  config.Size
		want string
	}{
		{0, ""},
		{8 << 20, ""},
		{4 << 20, "max_buffered 4.0 MiB is less than route big's max_body 8.0 MiB"},
	} {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		h := &Handler{Rules: *rules, Store: storeJSON(&embedded.Module{Dir: t.TempDir()}), MaxBuffered: tc.max}
		err := h.Provision(ctx)
		if err == nil {
			err = h.Validate()
		}
		_ = h.Cleanup()
		cancel()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("max_buffered %d: %v", tc.max, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("max_buffered %d: error %v, want %q", tc.max, err, tc.want)
		}
		if tc.max == 0 && h.maxBuffered() != 256<<20 {
			t.Errorf("default max_buffered = %d, want 256MiB", h.maxBuffered())
		}
	}
}

// TestBusyBeforeClaim: a request whose body would take the process past
// max_buffered is answered 503 busy with Retry-After: 1 before its key is
// claimed: once the bodies held are given back, the same request under
// the same key executes (it is not a duplicate of anything), and the
// refusal is counted for its route. Not parallel: the count of bodies
// held is the process's.
func TestBusyBeforeClaim(t *testing.T) {
	h, _ := newHandler(t, `
routes:
  - name: busy_route
    match: { path: /busy }
    key: ["{header.Idempotency-Key}"]
    max_body: 2KiB
`, &embedded.Module{Dir: t.TempDir()})
	h.bufferBudget = exchange.Buffered() + 3<<10
	body := strings.Repeat("x", 2<<10)

	// The first request's body is held while the upstream reads it.
	arrived, release := make(chan struct{}), make(chan struct{})
	up := &counting{}
	held := func(w http.ResponseWriter, r *http.Request) error {
		close(arrived)
		<-release
		_, _ = io.Copy(io.Discard, r.Body)
		return up.next(w, r)
	}
	first := make(chan int, 1)
	go func() { first <- serve(h, held, "POST", "/busy", body, "Idempotency-Key", "a").Code }()
	<-arrived

	before := busyCount(t)
	w := serve(h, up.next, "POST", "/busy", body, "Idempotency-Key", "b")
	close(release)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "#busy") || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("a body past max_buffered: %d %q %s, want 503 busy with Retry-After: 1", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if got := busyCount(t) - before; got != 1 {
		t.Errorf("idemgate_busy_total{route=busy_route} grew by %v, want 1", got)
	}
	if c := <-first; c != http.StatusCreated {
		t.Fatalf("the first request: %d", c)
	}
	w = serve(h, up.next, "POST", "/busy", body, "Idempotency-Key", "b")
	if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
		t.Errorf("the refused request again: %d %q, want 201 executed", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if n := up.calls.Load(); n != 2 {
		t.Errorf("upstream calls %d, want 2", n)
	}
}

// busyCount reads idemgate_busy_total{route="busy_route"}.
func busyCount(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.Process.Busy.WithLabelValues("busy_route").Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
