package adminapi

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/caddymodule"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/handlertest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
	"github.com/idemgate/idemgate/store/redis"
)

// TestMain gives the package's tests a Caddy data directory of their own
// (see handlertest.Main).
func TestMain(m *testing.M) { handlertest.Main(m, "idemgate-adminapi") }

// testStores are the store engines the API's tests run on.
var testStores = []struct {
	name string
	cfg  func(t *testing.T) caddy.Module
}{
	{"embedded", func(t *testing.T) caddy.Module {
		// A directory of its own gives each test its own embedded store.
		return &embedded.Module{Dir: t.TempDir()}
	}},
	{"redis", func(t *testing.T) caddy.Module {
		return &redis.Module{Addresses: []string{"redis://" + redistest.Start(t).Addr}}
	}},
}

// newHandler provisions an idempotency handler from YAML rules on the
// store sc, as a config load does, and cleans it up when the test ends.
func newHandler(t *testing.T, rules string, sc caddy.Module) *caddymodule.Handler {
	t.Helper()
	parsed, err := config.Parse("routes.yaml", []byte(rules), config.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	name := strings.TrimPrefix(string(sc.CaddyModule().ID), "idempotency.stores.")
	h := &caddymodule.Handler{Rules: *parsed, Store: caddyconfig.JSONModuleObject(sc, "engine", name, nil)}
	err = h.Provision(ctx)
	t.Cleanup(func() { _ = h.Cleanup() })
	if err == nil {
		err = h.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// engine is h's record store.
func engine(h *caddymodule.Handler) store.Engine {
	return h.LiveStore().Store.(store.Engine)
}

// newAdmin returns an operator API that sees only the stores of hs.
func newAdmin(hs ...*caddymodule.Handler) *AdminAPI {
	return &AdminAPI{stores: func() []operator.LiveStore {
		out := make([]operator.LiveStore, len(hs))
		for i, h := range hs {
			out[i] = h.LiveStore()
		}
		return out
	}}
}

// serve runs one request through h with next as the rest of the chain.
func serve(h *caddymodule.Handler, next caddyhttp.HandlerFunc, method, path, body string, headers ...string) *httptest.ResponseRecorder {
	return handlertest.Serve(h, next, method, path, body, headers...)
}

// problem is the part of a problem+json answer the tests read.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	RecordID string `json:"record_id"`
}
