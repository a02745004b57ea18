package caddymodule

import (
	"fmt"
	"os"
	"testing"
)

// TestMain gives the package's tests a Caddy data directory of their own:
// a handler on the embedded store without a directory opens Caddy's data
// directory + /idemgate, which one process owns, and must never be the
// machine's real one (a running gateway's, or another test binary's).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idemgate-caddymodule")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_DATA_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
