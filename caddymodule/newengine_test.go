package caddymodule_test

// A record store engine added from outside: this file registers one in the
// namespace idempotency.stores and runs the handler through it, from the
// JSON config and from the Caddyfile, without any change to the gateway's
// own files. The engine is the embedded engine on a directory of its own,
// wrapped to count the claims it is asked for.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/caddymodule"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
)

func init() { caddy.RegisterModule(countingStore{}) }

// countingStore is the guest module idempotency.stores.counting.
type countingStore struct {
	// Dir is the directory of the embedded engine underneath.
	Dir string `json:"dir"`
}

// claims counts the claims every counting engine was asked for.
var claims atomic.Int64

func (countingStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "idempotency.stores.counting", New: func() caddy.Module { return new(countingStore) }}
}

func (m *countingStore) PoolKey() string        { return "counting|" + m.Dir }
func (m *countingStore) Timeout() time.Duration { return store.DefaultOpTimeout }

func (m *countingStore) OpenEngine() (store.Engine, error) {
	e, err := embedded.Open(embedded.Options{Dir: m.Dir})
	if err != nil {
		return nil, err
	}
	return countingEngine{e}, nil
}

// UnmarshalCaddyfile reads `store counting <dir>`.
func (m *countingStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if !d.NextArg() || d.Val() != "counting" || !d.AllArgs(&m.Dir) {
		return d.ArgErr()
	}
	return nil
}

// countingEngine counts claims on the way to the engine underneath.
type countingEngine struct{ store.Engine }

func (e countingEngine) Claim(ctx context.Context, req store.ClaimRequest) (store.ClaimResult, error) {
	claims.Add(1)
	return e.Engine.Claim(ctx, req)
}

var (
	_ caddymodule.StoreModule = (*countingStore)(nil)
	_ caddyfile.Unmarshaler   = (*countingStore)(nil)
)

const newEngineRules = `routes:
  - name: deals
    match: { methods: [POST], path: /deals }
    key: ["{header.Idempotency-Key}"]
`

// TestNewEngine: the handler claims, forwards once and replays through an
// engine registered by another package, named in JSON and in the Caddyfile.
func TestNewEngine(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(rules, []byte(newEngineRules), 0o644); err != nil {
		t.Fatal(err)
	}
	caddyfileSrc := fmt.Sprintf(":8080 {\n\tidempotency {\n\t\trules %s\n\t\tstore counting %s\n\t}\n\trespond 201\n}\n", rules, filepath.Join(dir, "caddyfile-store"))
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfileSrc), map[string]any{"filename": filepath.Join(dir, "Caddyfile")})
	if err != nil {
		t.Fatal(err)
	}
	var fromCaddyfile struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []struct {
						Handle []json.RawMessage `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(adapted, &fromCaddyfile); err != nil {
		t.Fatal(err)
	}
	var handlerJSON json.RawMessage
	for _, srv := range fromCaddyfile.Apps.HTTP.Servers {
		for _, rt := range srv.Routes {
			for _, h := range rt.Handle {
				if strings.Contains(string(h), `"handler":"idempotency"`) {
					handlerJSON = h
				}
			}
		}
	}
	if !strings.Contains(string(handlerJSON), `"store":{"dir":"`+filepath.Join(dir, "caddyfile-store")+`","engine":"counting"}`) {
		t.Fatalf("the Caddyfile's store is not the counting engine: %s", handlerJSON)
	}

	routes, err := json.Marshal(map[string]any{"routes": []any{map[string]any{
		"name": "deals", "match": map[string]any{"methods": []string{"POST"}, "path": "/deals"}, "key": []string{"{header.Idempotency-Key}"}}}})
	if err != nil {
		t.Fatal(err)
	}
	fromJSON := fmt.Sprintf(`{%s,"store":{"engine":"counting","dir":%q}}`,
		strings.TrimSuffix(strings.TrimPrefix(string(routes), "{"), "}"), filepath.Join(dir, "json-store"))

	var handler map[string]json.RawMessage
	if err := json.Unmarshal(handlerJSON, &handler); err != nil {
		t.Fatal(err)
	}
	delete(handler, "handler") // the inline key, read by Caddy's loader
	adaptedHandler, err := json.Marshal(handler)
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]json.RawMessage{"Caddyfile": adaptedHandler, "JSON": json.RawMessage(fromJSON)} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			mod, err := ctx.LoadModuleByID("http.handlers.idempotency", cfg)
			if err != nil {
				t.Fatal(err)
			}
			h := mod.(*caddymodule.Handler)
			defer func() { _ = h.Cleanup() }()
			before := claims.Load()
			var calls atomic.Int64
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				calls.Add(1)
				w.WriteHeader(http.StatusCreated)
				_, err := w.Write([]byte(`{"id":"deal_1"}`))
				return err
			})
			for i, want := range []string{"", "true"} {
				req := httptest.NewRequest("POST", "/deals", strings.NewReader(`{}`))
				req.Header.Set("Idempotency-Key", "new-engine-"+name)
				w := httptest.NewRecorder()
				req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), w, &caddyhttp.Server{})
				if err := h.ServeHTTP(w, req, next); err != nil {
					t.Fatal(err)
				}
				if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != want {
					t.Fatalf("request %d: %d replayed %q, want 201 replayed %q", i+1, w.Code, w.Header().Get("Idempotent-Replayed"), want)
				}
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("upstream called %d times, want 1", n)
			}
			if n := claims.Load() - before; n != 2 {
				t.Errorf("the counting engine saw %d claims, want 2", n)
			}
		})
	}
}
