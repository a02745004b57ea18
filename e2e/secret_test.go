package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
)

// TestFleetStoredSecret: two gateways sharing one redis-server with no
// `secret` configured key their record ids with the secret the first of
// them kept in Redis, so they agree on every id (the second replays the
// first's result); a third with its own `secret` derives other ids. No id
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

	// Another secret, other ids: the third gateway does not know the
	// record (so every instance of a fleet needs the same secret).
	t.Setenv("E2E_FLEET_SECRET", mine)
	c := startGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: behaviourRules,
		extra: "secret {env.E2E_FLEET_SECRET}"})
	if r := send(t, "POST", c.url+"/deals", body, "Idempotency-Key", key, "Authorization", auth); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("delivery on the gateway with its own secret: %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
	}
	theirs, _ := keying.NewIDKey([]byte(mine))
	cid := theirs.KeyID("deals", scope, key)
	if cid == id {
		t.Fatal("two secrets gave one id")
	}
	if ids := adminRoutes(adminList(t, c, "", 0)); len(ids) != 2 {
		t.Fatalf("records in the shared Redis: %v, want two", ids)
	}
	var rec adminRecord
	adminJSON(t, c, "GET", "/idempotency/records/"+cid, "", &rec)
	// The same secret written literally: the same ids as through the
	// placeholder, so the fourth gateway replays the third's result.
	d := startGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: behaviourRules,
		extra: "secret " + mine})
	if r := send(t, "POST", d.url+"/deals", body, "Idempotency-Key", key, "Authorization", auth); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("delivery on the gateway with the literal secret: %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
	}
	if n := up.count("/deals"); n != 2 {
		t.Fatalf("upstream executions = %d, want 2 (one per secret)", n)
	}

	// Nothing shows a secret or the credential.
	var answers []string
	for _, gw := range []*gateway{a, b, c, d} {
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
