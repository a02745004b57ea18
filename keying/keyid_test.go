package keying

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
)

// refKeyID is KeyID written out with crypto/hmac, for comparison.
func refKeyID(secret, operation string, scope [32]byte, key string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("idemgate-key-v2\x00" + operation + "\x00" + string(scope[:]) + "\x00" + key))
	return hex.EncodeToString(mac.Sum(nil))[:32]
}

func mustIDKey(t testing.TB, secret string) *IDKey {
	t.Helper()
	k, err := NewIDKey([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyID(t *testing.T) {
	const secret = "0123456789abcdef-deployment"
	var scope [32]byte
	for i := range scope {
		scope[i] = byte(i)
	}
	k := mustIDKey(t, secret)
	got := k.KeyID("create_crm_deal", scope, "evt_184:create")
	if want := refKeyID(secret, "create_crm_deal", scope, "evt_184:create"); got != want {
		t.Fatalf("KeyID = %s, want HMAC-SHA-256 %s", got, want)
	}
	if len(got) != 32 || strings.Trim(got, "0123456789abcdef") != "" {
		t.Fatalf("KeyID %q is not 32 lowercase hex digits", got)
	}
	// The old unsalted form is gone: a log line's id cannot be recomputed
	// from a guessed key and scope without the secret.
	old := sha256.Sum256([]byte("idemgate-key-v1\x00create_crm_deal\x00" + string(scope[:]) + "\x00evt_184:create"))
	if got == hex.EncodeToString(old[:16]) {
		t.Fatal("KeyID is still the unsalted SHA-256")
	}
	// Every input matters, the secret included.
	other := [32]byte{1}
	for _, id := range []string{
		k.KeyID("create_crm_deal2", scope, "evt_184:create"),
		k.KeyID("create_crm_deal", other, "evt_184:create"),
		k.KeyID("create_crm_deal", scope, "evt_184:create2"),
		mustIDKey(t, secret+"x").KeyID("create_crm_deal", scope, "evt_184:create"),
	} {
		if id == got {
			t.Fatalf("KeyID ignores an input: %s", id)
		}
	}
	// The same secret gives the same ids in another deriver (another
	// gateway), and repeated calls reuse state without carrying it over.
	k2 := mustIDKey(t, secret)
	for range 3 {
		if id := k2.KeyID("create_crm_deal", scope, "evt_184:create"); id != got {
			t.Fatalf("a second deriver with the same secret gives %s, want %s", id, got)
		}
	}
	// Long operations and keys do not break the scratch buffer.
	long := strings.Repeat("x", 5000)
	if got, want := k.KeyID(long, scope, long), refKeyID(secret, long, scope, long); got != want {
		t.Fatalf("KeyID(long) = %s, want %s", got, want)
	}
}

func TestNewIDKeyShortSecret(t *testing.T) {
	for _, s := range []string{"", "x", strings.Repeat("s", MinSecretLen-1)} {
		k, err := NewIDKey([]byte(s))
		if !errors.Is(err, ErrShortSecret) || k != nil {
			t.Errorf("NewIDKey(%d bytes) = %v, %v; want ErrShortSecret", len(s), k, err)
		}
		if s != "" && err != nil && strings.Contains(err.Error(), s) {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
	if _, err := NewIDKey([]byte(strings.Repeat("s", MinSecretLen))); err != nil {
		t.Errorf("a %d-byte secret: %v", MinSecretLen, err)
	}
	// The secret is copied: changing the caller's slice changes nothing.
	b := []byte("0123456789abcdef")
	k, _ := NewIDKey(b)
	want := k.KeyID("op", [32]byte{}, "k")
	b[0] = 'X'
	if got := k.KeyID("op", [32]byte{}, "k"); got != want {
		t.Error("the deriver follows changes to the caller's secret slice")
	}
}

// TestKeyIDConcurrent: one deriver used from many goroutines (under
// -race) gives every goroutine the right ids.
func TestKeyIDConcurrent(t *testing.T) {
	const secret = "concurrent-secret-0123"
	k := mustIDKey(t, secret)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				key := strings.Repeat("k", g*40+i%7+1)
				if got, want := k.KeyID("op", [32]byte{byte(g)}, key), refKeyID(secret, "op", [32]byte{byte(g)}, key); got != want {
					errs <- got + " != " + want
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestPayloadID: the payload id is the HMAC of the fingerprint in a domain
// of its own: never a record id of the same inputs, the same for two
// derivers of one secret, different for another operation or scope.
func TestPayloadID(t *testing.T) {
	const secret = "0123456789abcdef-deployment"
	k := mustIDKey(t, secret)
	scope := SenderScope("standard-webhooks:default")
	got := k.PayloadID("payment_events", scope, "fp-1")
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("idemgate-payload-v1\x00payment_events\x00" + string(scope[:]) + "\x00fp-1"))
	if want := hex.EncodeToString(mac.Sum(nil)[:16]); got != want {
		t.Fatalf("PayloadID = %s, want %s", got, want)
	}
	for _, id := range []string{
		k.KeyID("payment_events", scope, "fp-1"),
		k.PayloadID("payment_events2", scope, "fp-1"),
		k.PayloadID("payment_events", SenderScope("standard-webhooks:eu"), "fp-1"),
		k.PayloadID("payment_events", scope, "fp-2"),
	} {
		if id == got {
			t.Fatalf("PayloadID %s collides with another input's id", id)
		}
	}
	if id := mustIDKey(t, secret).PayloadID("payment_events", scope, "fp-1"); id != got {
		t.Fatalf("a second deriver gives %s, want %s", id, got)
	}
	if SenderScope("") == ScopeHash(nil, NewInput("POST", nil, "", nil)) {
		t.Fatal("a sender scope equals a template scope")
	}
}
