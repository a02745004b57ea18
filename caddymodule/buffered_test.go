package caddymodule

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/config"
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
