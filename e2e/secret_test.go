package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
)

// TestFleetStoredSecret: two gateways sharing one redis-server with no
// `secret` configured key their record ids with the secret the first of
// them kept in Redis, so they agree on every id (the second replays the
// first's result); a third with its own `secret`, which would derive
// other ids, refuses to start; a fourth with the stored secret copied
// into its config replays. No id
// is the unsalted hash of operation, scope and key that a reader of the
// log could test guessed credentials against, and no log line or operator
// answer shows a secret or the credential.
func TestFleetStoredSecret(t *testing.T) {
	const (
		password = "hunter2-basic-password"
		key      = "fleet-secret-1"
		mine     = "configured-fleet-secret-42"
	)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+password))
	srv := redistest.Start(t)
	up := newUpstream(t)
	a := startGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: behaviourRules})
	b := startGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: behaviourRules})

	body := []byte(`{"title":"secret"}`)
	first := send(t, "POST", a.url+"/deals", body, "Idempotency-Key", key, "Authorization", auth)
	if first.status != http.StatusCreated {
		t.Fatalf("first delivery: %d %s", first.status, first.body)
	}
	if r := send(t, "POST", b.url+"/deals", body, "Idempotency-Key", key, "Authorization", auth); r.status != http.StatusCreated ||
		r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, first.body) {
		t.Fatalf("retry on the second gateway: %d replayed=%q %s", r.status, r.header.Get("Idempotent-Replayed"), r.body)
	}
	if n := up.count("/deals"); n != 1 {
		t.Fatalf("upstream executions = %d, want 1", n)
	}
	id := adminOnly(t, a, "deals").ID
	if other := adminOnly(t, b, "deals").ID; other != id {
		t.Fatalf("the gateways list the record as %s and %s", id, other)
	}

	in := keying.NewInput("POST", http.Header{"Authorization": {auth}}, "", nil)
	scope := keying.ScopeHash(defaultScope, in)
	sum := sha256.Sum256([]byte("idemgate-key-v1\x00deals\x00" + string(scope[:]) + "\x00" + key))
	if id == hex.EncodeToString(sum[:16]) {
		t.Fatal("the record id is the unsalted SHA-256 of operation, scope and key: anyone with the log can test guessed passwords")
	}
	// The id is the HMAC under the secret kept in Redis.
	stored, err := srv.Client(t).Get(context.Background(), "idemgate:secret").Result()
	if err != nil || len(stored) != 64 {
		t.Fatalf("secret in Redis: %d bytes, %v; want 64 hex digits", len(stored), err)
	}
	ids, err := keying.NewIDKey([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	if want := ids.KeyID("deals", scope, key); id != want {
		t.Fatalf("record id %s, want %s (HMAC under the stored secret)", id, want)
	}

	// Another secret would give other ids, so the third gateway, with its
	// own secret, refuses to start (every instance of a fleet needs the
	// same secret).
	t.Setenv("E2E_FLEET_SECRET", mine)
	c := writeGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: behaviourRules,
		extra: "secret {env.E2E_FLEET_SECRET}"})
	if startOrRefused(t, c) {
		t.Fatal("a gateway with another secret started on the fleet's store")
	}
	if !strings.Contains(c.logs.String(), "same `secret`") {
		t.Fatalf("the refusal does not say why:\n%s", c.logs.String())
	}
	// The stored secret copied into the config: the same ids, so the
	// fourth gateway replays the first's result.
	d := startGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: behaviourRules,
		extra: "secret " + stored})
	if r := send(t, "POST", d.url+"/deals", body, "Idempotency-Key", key, "Authorization", auth); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("delivery on the gateway with the stored secret written literally: %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
	}
	if n := up.count("/deals"); n != 1 {
		t.Fatalf("upstream executions = %d, want 1", n)
	}

	// Nothing shows a secret or the credential.
	var answers []string
	answers = append(answers, c.logs.String())
	for _, gw := range []*gateway{a, b, d} {
		_, list := adminDo(t, gw, "GET", "/idempotency/records", "")
		_, one := adminDo(t, gw, "GET", "/idempotency/records/"+id, "")
		answers = append(answers, string(list), string(one), gw.logs.String())
		if !strings.Contains(gw.logs.String(), `"record_id":"`) {
			t.Fatal("no decision was logged")
		}
	}
	for _, s := range answers {
		for _, secret := range []string{stored, mine, password, auth} {
			if strings.Contains(s, secret) {
				t.Errorf("a log or operator answer shows %.6s…: %.300s", secret, s)
			}
		}
	}
}

// startOrRefused runs the gateway and waits until it answers or exits:
// true when it started (it is stopped when the test ends), false when it
// refused to start (its output is in g.logs).
func startOrRefused(t *testing.T, g *gateway) bool {
	t.Helper()
	g.run()
	g.exited = make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(g.exited) }()
	t.Cleanup(g.stop)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-g.exited:
			return false
		default:
		}
		// The admin API answers before the config is provisioned: the
		// gateway has started once its own port accepts.
		if c, err := net.DialTimeout("tcp", strings.TrimPrefix(g.url, "http://"), time.Second); err == nil {
			c.Close()
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gateway neither started nor exited in 20s:\n%s", g.logs.String())
	return false
}

// TestSecretMismatchRefused: a gateway whose secret is not the one the
// store's records were made under refuses to start, naming the store and
// saying that every instance must use the same `secret`, so a retry that
// reaches it cannot execute again: on Redis a gateway with a configured
// secret beside one using the store's own; on Postgres two configured
// secrets, and one with none (so the store's own) after a configured
// one; an embedded DIR restarted with another secret.
func TestSecretMismatchRefused(t *testing.T) {
	const key = "mismatch-1"
	body := []byte(`{"title":"mismatch"}`)
	t.Setenv("E2E_SECRET_A", "first-secret-of-the-fleet-0001")
	t.Setenv("E2E_SECRET_B", "other-secret-of-the-fleet-0002")
	// second tries the retry on gateway b after a completed the key; b
	// must refuse to start, naming where.
	second := func(t *testing.T, up *upstream, b *gateway, where string) {
		t.Helper()
		if startOrRefused(t, b) {
			r := send(t, "POST", b.url+"/deals", body, "Idempotency-Key", key)
			t.Fatalf("the gateway with another secret started; the retry on it answered %d replayed=%q and the upstream executed the key %d times",
				r.status, r.header.Get("Idempotent-Replayed"), up.count("/deals"))
		}
		out := b.logs.String()
		for _, want := range []string{where, "every instance", "same `secret`", "check value", "made at"} {
			if !strings.Contains(out, want) {
				t.Fatalf("refusal does not say %q:\n%s", want, out)
			}
		}
		for _, s := range []string{"first-secret-of-the-fleet-0001", "other-secret-of-the-fleet-0002", "hunter2"} {
			if strings.Contains(out, s) {
				t.Fatalf("the refusal shows a secret or a password (%.6s…)", s)
			}
		}
		t.Logf("refused: %s", refusalLine(out))
		if n := up.count("/deals"); n != 1 {
			t.Fatalf("upstream executions = %d, want 1", n)
		}
	}
	first := func(t *testing.T, a *gateway) {
		t.Helper()
		if r := send(t, "POST", a.url+"/deals", body, "Idempotency-Key", key); r.status != http.StatusCreated {
			t.Fatalf("first delivery: %d %s", r.status, r.body)
		}
	}

	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		up := newUpstream(t)
		url := "redis://:hunter2@" + srv.Addr + "/0"
		srv.Client(t).ConfigSet(context.Background(), "requirepass", "hunter2")
		a := startGateway(t, gatewayConfig{store: url, upstream: up.addr(), rules: behaviourRules})
		first(t, a)
		b := writeGateway(t, gatewayConfig{store: url, upstream: up.addr(), rules: behaviourRules, extra: "secret {env.E2E_SECRET_B}"})
		second(t, up, b, "redis://:xxxxx@"+srv.Addr+"/0")
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Shared(t).CreateDatabase(t)
		up := newUpstream(t)
		a := startGateway(t, gatewayConfig{store: url, upstream: up.addr(), rules: behaviourRules, extra: "schema fleet_one\n\t\tsecret {env.E2E_SECRET_A}"})
		first(t, a)
		b := writeGateway(t, gatewayConfig{store: url, upstream: up.addr(), rules: behaviourRules, extra: "schema fleet_one\n\t\tsecret {env.E2E_SECRET_B}"})
		second(t, up, b, `schema \"fleet_one\"`) // as the JSON log escapes it
		// No secret configured: the one the store keeps is not A's either.
		c := writeGateway(t, gatewayConfig{store: url, upstream: up.addr(), rules: behaviourRules, extra: "schema fleet_one"})
		second(t, up, c, `schema \"fleet_one\"`)
	})
	t.Run("embedded", func(t *testing.T) {
		up := newUpstream(t)
		a := writeGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: behaviourRules, extra: "secret {env.E2E_SECRET_A}"})
		a.start()
		first(t, a)
		a.stop()
		cf, err := os.ReadFile(a.caddyfile)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(a.caddyfile, bytes.Replace(cf, []byte("E2E_SECRET_A"), []byte("E2E_SECRET_B"), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		a.logs = new(syncBuffer)
		second(t, up, a, filepath.Join(a.dir, "store"))
	})
}

// refusalLine is the line of a gateway's output that says why it did
// not start.
func refusalLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "same `secret`") {
			if i := strings.Index(l, "idempotency store: "); i >= 0 {
				return l[i:]
			}
			return l
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
