package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store/redis"
)

// secretRoutes is one route, keyed from the header, in Caddy's JSON.
const secretRoutes = `"routes":[{"name":"deals","match":{"path":"/deals"},"key":["{header.Idempotency-Key}"]}]`

// newHandlerJSON provisions a handler from its JSON config the way Caddy
// loads it (unknown fields are errors), with its logs observed.
func newHandlerJSON(t *testing.T, config string) (*Handler, *observer.ObservedLogs, error) {
	t.Helper()
	h := new(Handler)
	if err := caddy.StrictUnmarshalJSON([]byte(config), h); err != nil {
		return nil, nil, err
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	err := h.Provision(ctx)
	t.Cleanup(func() { _ = h.Cleanup() })
	if err != nil {
		return nil, nil, err
	}
	core, logs := observer.New(zap.DebugLevel)
	h.gate.Logger = zap.New(core)
	return h, logs, nil
}

// keyIDOf sends one request with key through h and returns the key id its
// decision was logged with (the handler's last decision line).
func keyIDOf(t *testing.T, h *Handler, logs *observer.ObservedLogs, key string, headers ...string) string {
	t.Helper()
	up := &counting{}
	w := serve(h, up.next, "POST", "/deals", `{}`, append([]string{"Idempotency-Key", key}, headers...)...)
	if w.Code != http.StatusCreated && w.Code != http.StatusOK {
		t.Fatalf("POST /deals: %d %s", w.Code, w.Body)
	}
	entries := logs.FilterMessage("idempotency decision").All()
	if len(entries) == 0 {
		t.Fatal("no decision line")
	}
	id, _ := entries[len(entries)-1].ContextMap()["record_id"].(string)
	if len(id) != 32 {
		t.Fatalf("record_id %q", id)
	}
	return id
}

// unsaltedKeyID is the record id of the first releases: a plain SHA-256
// of operation, scope and key, which anyone could recompute.
func unsaltedKeyID(operation string, h http.Header, key string) string {
	in := keying.NewInput("POST", h, "", nil)
	scope := keying.ScopeHash([]keying.Template{keying.MustParseTemplate("{header.Authorization}")}, in)
	sum := sha256.Sum256([]byte("idemgate-key-v1\x00" + operation + "\x00" + string(scope[:]) + "\x00" + key))
	return hex.EncodeToString(sum[:16])
}

// TestKeyIDsUnderSecret: record ids are keyed with the deployment secret
// (store option `secret`, placeholders resolved): two secrets give two
// ids for one key and scope, the same secret the same id, and none of them
// is the unsalted hash a reader of the log could recompute.
func TestKeyIDsUnderSecret(t *testing.T) {
	const secretA, secretB = "first-deployment-secret-0123", "second-deployment-secret-456"
	// Each config on a store of its own: a store refuses a secret other
	// than the one its records were made under.
	cfg := func(secret string) string {
		return fmt.Sprintf(`{%s,"secret":%q,"store":{"engine":"embedded","dir":%q}}`, secretRoutes, secret, t.TempDir())
	}
	auth := []string{"Authorization", "Basic YWxpY2U6aHVudGVyMg=="}
	ids := map[string]string{}
	for name, c := range map[string]string{"A": cfg(secretA), "B": cfg(secretB), "A again": cfg(secretA)} {
		h, logs, err := newHandlerJSON(t, c)
		if err != nil {
			t.Fatalf("config %s: %v", name, err)
		}
		ids[name] = keyIDOf(t, h, logs, "shared-key", auth...)
	}
	if ids["A"] == ids["B"] {
		t.Errorf("two secrets, one id %s", ids["A"])
	}
	if ids["A"] != ids["A again"] {
		t.Errorf("one secret, two ids: %s and %s", ids["A"], ids["A again"])
	}
	plain := unsaltedKeyID("deals", http.Header{"Authorization": {auth[1]}}, "shared-key")
	for name, id := range ids {
		if id == plain {
			t.Errorf("config %s: the id is the unsalted SHA-256 of operation, scope and key", name)
		}
	}

	// {env.*} placeholders are resolved at Provision.
	t.Setenv("IDEMGATE_TEST_SECRET", secretA)
	h, logs, err := newHandlerJSON(t, cfg("{env.IDEMGATE_TEST_SECRET}"))
	if err != nil {
		t.Fatal(err)
	}
	if id := keyIDOf(t, h, logs, "shared-key", auth...); id != ids["A"] {
		t.Errorf("secret from {env.IDEMGATE_TEST_SECRET}: id %s, want %s", id, ids["A"])
	}
	if len(logs.All()) == 0 {
		t.Fatal("nothing was logged")
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.ContextMap()), secretA) || strings.Contains(e.Message, secretA) {
			t.Errorf("a log line shows the secret: %s %v", e.Message, e.ContextMap())
		}
	}
}

// TestSecretConfigErrors: a secret shorter than 16 bytes, or a
// placeholder that resolves to nothing, fails the config without showing
// the value.
func TestSecretConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, secret, want string }{
		{"short", "hunter2-short", "secret is 13 bytes, at least 16"},
		{"empty placeholder", "{env.IDEMGATE_TEST_UNSET_SECRET}", "secret is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := newHandlerJSON(t, fmt.Sprintf(`{%s,"secret":%q}`, secretRoutes, tc.secret))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Provision: %v, want an error saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

// TestKeyIDsFromStoredSecret: with no secret configured the ids are keyed
// with the secret kept in the store, so two gateways on one store (here two
// separate connections) derive the same id, and it is not the unsalted
// hash.
func TestKeyIDsFromStoredSecret(t *testing.T) {
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			sc := st.cfg(t)
			var got []string
			var first *Handler
			for i := range 2 {
				if m, ok := sc.(*redis.Module); ok {
					m.PoolSize = 3 + i // its own connection to the same Redis
				}
				h, logs, err := newHandlerJSON(t, fmt.Sprintf(`{%s,"store":%s}`, secretRoutes, storeJSON(sc)))
				if err != nil {
					t.Fatal(err)
				}
				if first == nil {
					first = h
				}
				got = append(got, keyIDOf(t, h, logs, "stored-secret-key"))
			}
			if got[0] != got[1] {
				t.Fatalf("two gateways on one store: ids %s and %s", got[0], got[1])
			}
			if got[0] == unsaltedKeyID("deals", http.Header{}, "stored-secret-key") {
				t.Fatal("with no secret configured the id is the unsalted SHA-256")
			}
			secret, err := first.gate.Store.Secret(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ids, err := keying.NewIDKey(secret)
			if err != nil {
				t.Fatal(err)
			}
			in := keying.NewInput("POST", http.Header{}, "", nil)
			if want := ids.KeyID("deals", keying.ScopeHash(first.routes[0].Scope, in), "stored-secret-key"); got[0] != want {
				t.Fatalf("id %s, want %s (HMAC under the stored secret)", got[0], want)
			}
		})
	}
}
