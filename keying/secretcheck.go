package keying

import (
	"crypto/hmac"
	"crypto/sha256"
)

// secretCheckLabel is the fixed message whose HMAC under the deployment
// secret is the secret's check value.
const secretCheckLabel = "idemgate-secret-check-v1"

// SecretCheck returns the check value of a deployment secret:
// HMAC-SHA-256(secret, "idemgate-secret-check-v1"). A store keeps the
// check value of the secret its records were made under, so a gateway
// with another secret (which would derive other record ids, and execute
// every retry again) is recognised without the store ever holding the
// secret. The value reveals nothing of the secret.
func SecretCheck(secret []byte) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(secretCheckLabel))
	return mac.Sum(nil)
}
