package caddymodule

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/idemgate/idemgate/store/embedded"
)

var update = flag.Bool("update", false, "rewrite golden files")

func adapt(t *testing.T, file string) ([]byte, error) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": file})
	return out, err
}

// TestCaddyfileGolden adapts Caddyfiles to JSON and compares with golden
// files: the rules file is inlined, and the directive sorts after
// basic_auth and encode and before reverse_proxy without a global order.
func TestCaddyfileGolden(t *testing.T) {
	for _, name := range []string{"embedded", "redis", "sentinel", "postgres"} {
		t.Run(name, func(t *testing.T) {
			out, err := adapt(t, filepath.Join("testdata", name+".caddyfile"))
			if err != nil {
				t.Fatal(err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "\t"); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			golden := filepath.Join("testdata", name+".json")
			if *update {
				if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(pretty.Bytes(), want) {
				t.Errorf("adapted JSON differs from %s (run go test -update):\n%s", golden, pretty.String())
			}
		})
	}
}

func TestCaddyfileOrder(t *testing.T) {
	out, err := adapt(t, filepath.Join("testdata", "redis.caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	order := []string{`"handler":"authentication"`, `"handler":"encode"`, `"handler":"idempotency"`, `"handler":"reverse_proxy"`}
	last := -1
	for _, h := range order {
		i := strings.Index(s, h)
		if i < 0 || i < last {
			t.Fatalf("handler order wrong: want %v in that order in\n%s", order, s)
		}
		last = i
	}
}

func TestCaddyfileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := "routes:\n  - name: a\n    match: { path: /a }\n    key: [\"{header.K}\"]\n  - name: b\n    match: { path: /b }\n    key: [\"{header.K}\"]\n    on_unknown_outcome: maybe\n"
	good := "routes:\n  - name: a\n    match: { path: /a }\n    key: [\"{header.K}\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "routes.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "good.yaml"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, caddyfile, want string }{
		{"invalid rules name file line and field", "idempotency {\n rules routes.yaml\n}", `routes.yaml:8: routes[1].on_unknown_outcome: "maybe" is not one of hold, release, store`},
		{"missing rules", "idempotency {\n store embedded\n}", "a rules file is required"},
		{"unknown option", "idempotency {\n rules good.yaml\n colour blue\n}", "unrecognized option 'colour' of the embedded store"},
		{"bad timeout", "idempotency {\n rules good.yaml\n op_timeout soon\n}", `op_timeout: "soon" is not a positive duration`},
		{"bad wait_replicas", "idempotency {\n rules good.yaml\n store redis://127.0.0.1:6379\n wait_replicas one\n}", `wait_replicas: "one" is not a non-negative number`},
		{"wait_replicas with a word other than strict", "idempotency {\n rules good.yaml\n store redis://127.0.0.1:6379\n wait_replicas 1 always\n}", `wait_replicas: "always" is not strict`},
		{"strict without replicas", "idempotency {\n rules good.yaml\n store redis://127.0.0.1:6379\n wait_replicas 0 strict\n}", `wait_replicas: strict needs at least one replica`},
		{"allow_eviction with an argument", "idempotency {\n rules good.yaml\n store redis://127.0.0.1:6379\n allow_eviction yes\n}", "wrong argument count"},
		{"bad wait_timeout", "idempotency {\n rules good.yaml\n store redis://127.0.0.1:6379\n wait_timeout 0s\n}", `wait_timeout: "0s" is not a positive duration`},
		{"tls_ca_file without a file", "idempotency {\n rules good.yaml\n store redis://127.0.0.1:6379\n tls_ca_file\n}", "wrong argument count"},
		{"missing file", "idempotency {\n rules nope.yaml\n}", "nope.yaml"},
		{"unknown option of Redis", "idempotency {\n rules good.yaml\n store redis://127.0.0.1:6379 {\n  colour blue\n }\n}", "unrecognized option 'colour' of the Redis store"},
		{"wait_replicas on the embedded store", "idempotency {\n rules good.yaml\n wait_replicas 1\n}", "wait_replicas needs a Redis with replicas; the embedded store has none, at "},
		{"allow_eviction on the embedded store", "idempotency {\n rules good.yaml\n store embedded\n allow_eviction\n}", "allow_eviction is for Redis; the embedded store evicts nothing"},
		{"a Redis option on the embedded store", "idempotency {\n rules good.yaml\n master_name m\n}", "master_name is an option of the Redis store"},
		{"cache_size on Redis", "idempotency {\n rules good.yaml\n store redis://127.0.0.1:6379\n cache_size 64MiB\n}", "cache_size is the embedded store's"},
		{"sync_interval on Redis", "idempotency {\n rules good.yaml\n store redis://127.0.0.1:6379\n sync_interval 50ms\n}", "sync_interval is the embedded store's"},
		{"bad sync_interval", "idempotency {\n rules good.yaml\n sync_interval 0s\n}", `sync_interval: "0s" is not a positive duration`},
		{"store twice", "idempotency {\n rules good.yaml\n store embedded\n store embedded\n}", "store: given twice"},
		{"unknown option of Postgres", "idempotency {\n rules good.yaml\n store postgres://db/app\n colour blue\n}", "unrecognized option 'colour' of the Postgres store"},
		{"Postgres with two URLs", "idempotency {\n rules good.yaml\n store postgres://a/app postgres://b/app\n}", "store postgres takes one connection URL, got 2 arguments"},
		{"bad pool_size on Postgres", "idempotency {\n rules good.yaml\n store postgres://db/app\n pool_size 0\n}", `pool_size: "0" is not a positive number`},
		{"wait_replicas on Postgres", "idempotency {\n rules good.yaml\n store postgres://db/app\n wait_replicas 1\n}", "wait_replicas is for Redis; on Postgres a claim waits for the synchronous standbys"},
		{"a Redis option on Postgres", "idempotency {\n rules good.yaml\n store postgresql://db/app\n key_prefix x\n}", "key_prefix is an option of the Redis store; on Postgres"},
		{"Postgres schema public", "idempotency {\n rules good.yaml\n store postgres://db/app\n schema public\n}", `schema: "public" is the database's default schema, where the application's own tables live: name one for the store alone, e.g. idemgate, at `},
		{"Postgres schema information_schema", "idempotency {\n rules good.yaml\n store postgres://db/app\n schema information_schema\n}", `schema: "information_schema" is the SQL standard's catalog: name one for the store alone, e.g. idemgate, at `},
		{"Postgres schema pg_", "idempotency {\n rules good.yaml\n store postgres://db/app\n schema pg_idemgate\n}", `schema: "pg_idemgate" starts with pg_, which Postgres keeps for its own schemas: name one for the store alone, e.g. idemgate, at `},
		{"short secret", "idempotency {\n rules good.yaml\n secret hunter2\n}", "secret: 7 bytes, at least 16 needed, at "},
		{"bad max_buffered", "idempotency {\n rules good.yaml\n max_buffered lots\n}", `max_buffered: "lots" is not a positive size like 256MiB`},
		{"max_buffered of nothing", "idempotency {\n rules good.yaml\n max_buffered 0\n}", `max_buffered: "0" is not a positive size`},
		{"secret without a value", "idempotency {\n rules good.yaml\n secret\n}", "wrong argument count"},
		{"embedded with two directories", "idempotency {\n rules good.yaml\n store embedded a b\n}", "store embedded takes one directory"},
		{"lock_lease not longer than op_timeout", "idempotency {\n rules good.yaml\n op_timeout 30s\n}",
			`good.yaml:1: defaults.lock_lease: 30s (the default) is not longer than the store's op_timeout (30s)`},
		{"op_timeout before rules", "idempotency {\n op_timeout 1m\n rules good.yaml\n}",
			`good.yaml:1: defaults.lock_lease: 30s (the default) is not longer than the store's op_timeout (1m0s)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, "Caddyfile")
			if err := os.WriteFile(file, []byte(":8080 {\n"+tc.caddyfile+"\n}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := adapt(t, file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

// TestCaddyfileCAFileRelative: a relative tls_ca_file is taken from the
// Caddyfile's directory, like rules.
func TestCaddyfileCAFileRelative(t *testing.T) {
	dir := t.TempDir()
	good := "routes:\n  - name: a\n    match: { path: /a }\n    key: [\"{header.K}\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "routes.yaml"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(":8080 {\nidempotency {\n rules routes.yaml\n store rediss://127.0.0.1:6380\n tls_ca_file certs/ca.pem\n}\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := adapt(t, file)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(filepath.Join(dir, "certs", "ca.pem"))
	if !strings.Contains(string(out), `"tls_ca_file":`+string(want)) {
		t.Fatalf("tls_ca_file not resolved against the Caddyfile's directory:\n%s", out)
	}
}

// TestCaddyfileEmbeddedDir: `store embedded DIR` sets the store's dir, a
// relative one taken from the Caddyfile's directory; without DIR the dir
// is left to the default.
func TestCaddyfileEmbeddedDir(t *testing.T) {
	dir := t.TempDir()
	rules := "routes:\n  - name: a\n    match: { path: /a }\n    key: [\"{header.K}\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "routes.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	for store, want := range map[string]string{
		"embedded data":          filepath.Join(dir, "data"),
		"embedded /srv/idemgate": "/srv/idemgate",
		"embedded":               "",
	} {
		file := filepath.Join(dir, "Caddyfile")
		caddyfile := ":8080 {\n idempotency {\n  rules routes.yaml\n  store " + store + "\n }\n}\n"
		if err := os.WriteFile(file, []byte(caddyfile), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := adapt(t, file)
		if err != nil {
			t.Fatalf("store %s: %v", store, err)
		}
		var cfg struct {
			Apps struct {
				HTTP struct {
					Servers map[string]struct {
						Routes []struct {
							Handle []struct {
								Handler string `json:"handler"`
								Store   struct {
									Engine string `json:"engine"`
									embedded.Module
								} `json:"store"`
							} `json:"handle"`
						} `json:"routes"`
					} `json:"servers"`
				} `json:"http"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, srv := range cfg.Apps.HTTP.Servers {
			for _, rt := range srv.Routes {
				for _, h := range rt.Handle {
					if h.Handler == "idempotency" {
						found = true
						if h.Store.Dir != want || h.Store.Engine != "embedded" {
							t.Errorf("store %s: %+v, want dir %q", store, h.Store, want)
						}
					}
				}
			}
		}
		if !found {
			t.Fatalf("store %s: no idempotency handler in %s", store, out)
		}
	}
}
