package keying

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

// TestSecretCheck: the check value is HMAC-SHA-256 of the fixed label
// under the secret: the same for one secret, another for another, and
// never the secret or a plain hash of it.
func TestSecretCheck(t *testing.T) {
	a, b := []byte("first-secret-of-the-fleet-0001"), []byte("other-secret-of-the-fleet-0002")
	mac := hmac.New(sha256.New, a)
	mac.Write([]byte("idemgate-secret-check-v1"))
	if got := SecretCheck(a); !bytes.Equal(got, mac.Sum(nil)) {
		t.Fatalf("SecretCheck = %x, want the HMAC of the label", got)
	}
	if !bytes.Equal(SecretCheck(a), SecretCheck(bytes.Clone(a))) {
		t.Fatal("one secret, two check values")
	}
	if bytes.Equal(SecretCheck(a), SecretCheck(b)) {
		t.Fatal("two secrets, one check value")
	}
	if sum := sha256.Sum256(a); bytes.Equal(SecretCheck(a), sum[:]) || bytes.Contains(SecretCheck(a), a[:8]) {
		t.Fatal("the check value is the secret's plain hash or holds the secret")
	}
}
