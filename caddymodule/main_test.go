package caddymodule

import (
	"testing"

	"github.com/idemgate/idemgate/internal/handlertest"
)

// TestMain gives the package's tests a Caddy data directory of their own
// (see handlertest.Main).
func TestMain(m *testing.M) { handlertest.Main(m, "idemgate-caddymodule") }
