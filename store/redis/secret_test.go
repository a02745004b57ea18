package redis

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestSecret: the deployment secret is made once, atomically, and every
// Store on the same Redis and prefix reads the same one; another prefix
// has its own; it stays out of the record listings.
func TestSecret(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		// Gateways starting at once race to create it: all agree.
		const n = 8
		got := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = New(e.s.Client(), "", time.Second).Secret(ctx)
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("Secret %d: %v", i, errs[i])
			}
			if string(got[i]) != string(got[0]) {
				t.Fatalf("two stores on one Redis got different secrets")
			}
		}
		secret := got[0]
		if raw, err := hex.DecodeString(string(secret)); err != nil || len(raw) != 32 {
			t.Fatalf("secret is not 32 hex-encoded random bytes: %d bytes, %v", len(secret), err)
		}
		stored, err := e.s.Client().Get(ctx, "idemgate:secret").Result()
		if err != nil || stored != string(secret) || e.s.SecretKey() != "idemgate:secret" {
			t.Fatalf("Redis holds %d bytes under %s (%v), want the secret", len(stored), e.s.SecretKey(), err)
		}
		if ttl, _ := e.s.Client().TTL(ctx, "idemgate:secret").Result(); ttl >= 0 {
			t.Errorf("the secret expires (TTL %v)", ttl)
		}
		again, err := e.s.Secret(ctx)
		if err != nil || string(again) != string(secret) {
			t.Fatalf("second call: %v", err)
		}
		// The caller may scribble on what it got.
		again[0] ^= 1
		if mine, _ := e.s.Secret(ctx); string(mine) != string(secret) {
			t.Fatal("Secret hands out its cached slice")
		}

		other, err := New(e.s.Client(), "tenant2:", 0).Secret(ctx)
		if err != nil || string(other) == string(secret) {
			t.Fatalf("another prefix: %v, same secret %v", err, string(other) == string(secret))
		}

		// Not a record: scans and listings skip it.
		storetest.MustClaim(t, e.s, storetest.ClaimReq(storetest.NewID(t), "tok"))
		var ids []string
		if err := e.s.ScanIDs(ctx, func(id string) error { ids = append(ids, id); return nil }); err != nil || len(ids) != 1 {
			t.Fatalf("ScanIDs: %v %v, want the one record", ids, err)
		}
		page, err := e.s.List(ctx, store.ListFilter{})
		if err != nil || len(page.Records) != 1 {
			t.Fatalf("List: %d records, %v; want 1", len(page.Records), err)
		}

		// Once read, the secret needs Redis no more (a reload while Redis
		// is down still derives the same ids).
		e.stop()
		if cached, err := e.s.Secret(ctx); err != nil || string(cached) != string(secret) {
			t.Fatalf("cached secret with Redis down: %v", err)
		}
	})
}

// TestSecretKeptByHand: a value an operator stored is used as it is; one
// that is too short is refused without showing it.
func TestSecretKeptByHand(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const mine = "operator-chosen-secret-value"
		if err := e.s.Client().Set(ctx, "hand:secret", mine, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := New(e.s.Client(), "hand:", 0).Secret(ctx); err != nil || string(got) != mine {
			t.Fatalf("hand-stored secret: %q, %v", got, err)
		}
		const short = "tooShort"
		if err := e.s.Client().Set(ctx, "short:secret", short, 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := New(e.s.Client(), "short:", 0).Secret(ctx)
		if err == nil || !strings.Contains(err.Error(), "short:secret is 8 bytes") || strings.Contains(err.Error(), short) {
			t.Fatalf("short stored secret: %v", err)
		}
	})
}

// TestSecretUnreachable: without Redis, Secret fails (and a later call,
// with Redis back, succeeds).
func TestSecretUnreachable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{srv.Addr}, OpTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	srv.Stop()
	if _, err := s.Secret(context.Background()); err == nil || !strings.Contains(err.Error(), "deployment secret") {
		t.Fatalf("Secret with Redis down: %v", err)
	}
	srv.Restart(t)
	if got, err := s.Secret(context.Background()); err != nil || len(got) != 64 {
		t.Fatalf("Secret after Redis came back: %d bytes, %v", len(got), err)
	}
}

// TestSecretCluster: on a three-master Cluster the secret is one key on
// one slot, the same for every client.
func TestSecretCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	var secrets []string
	for range 2 {
		s, err := Open(Options{Addrs: cl.Addrs(), Cluster: true})
		if err != nil {
			t.Fatalf("Open cluster: %v", err)
		}
		got, err := s.Secret(context.Background())
		_ = s.Close()
		if err != nil {
			t.Fatalf("Secret on Cluster: %v", err)
		}
		secrets = append(secrets, string(got))
	}
	if secrets[0] != secrets[1] || len(secrets[0]) != 64 {
		t.Fatalf("two cluster clients: %d and %d bytes, equal %v", len(secrets[0]), len(secrets[1]), secrets[0] == secrets[1])
	}
}
