package caddymodule

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store/embedded"
)

// TestProvisionChecksRulesAgainstStore: where the route rules meet the
// store's options, a lock_lease not longer than op_timeout is an error
// naming the field (and, for a rules file, the file and line); inline
// routes beside rules_file are an error, never a silent choice.
func TestProvisionChecksRulesAgainstStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "routes.yaml")
	yaml := "routes:\n  - name: a\n    match: { path: /a }\n    key: [\"{header.K}\"]\n    lock_lease: 3s\n"
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	inline := func(lease time.Duration) config.Rules {
		return config.Rules{Routes: []config.Route{{Name: "a", Match: config.Match{Path: "/a"}, Key: []string{"{header.K}"},
			Policy: config.Policy{LockLease: config.Duration(lease)}}}}
	}
	for _, tc := range []struct {
		name string
		h    Handler
		want string // "" when Provision succeeds
	}{
		{"inline lease equal to the default op_timeout", Handler{Rules: inline(2 * time.Second)},
			"idempotency rules: routes[0].lock_lease: 2s is not longer than the store's op_timeout (2s)"},
		{"inline lease shorter than op_timeout", Handler{Rules: inline(3 * time.Second), Store: storeJSON(&embedded.Module{OpTimeout: caddy.Duration(5 * time.Second)})},
			"idempotency rules: routes[0].lock_lease: 3s is not longer than the store's op_timeout (5s)"},
		{"inline lease longer than op_timeout", Handler{Rules: inline(3 * time.Second)}, ""},
		{"rules file", Handler{RulesFile: file, Store: storeJSON(&embedded.Module{OpTimeout: caddy.Duration(3 * time.Second)})},
			"idempotency rules: " + file + ":5: routes[0].lock_lease: 3s is not longer than the store's op_timeout (3s)"},
		{"rules file, lease longer", Handler{RulesFile: file}, ""},
		{"inline routes and rules_file", Handler{RulesFile: file, Rules: inline(3 * time.Second)},
			"idempotency: rules_file and inline routes are both set; use one of them"},
		{"inline defaults and rules_file", Handler{RulesFile: file, Rules: config.Rules{Defaults: config.Policy{TTL: config.Duration(time.Hour)}}},
			"idempotency: rules_file and inline defaults are both set; use one of them"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			h := tc.h
			err := h.Provision(ctx)
			defer func() { _ = h.Cleanup() }()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Provision:\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}
