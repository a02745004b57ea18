package store

import "time"

// SecretCheck is the check value of the deployment secret a store's
// records are made under (see Engine.KeepSecretCheck): an HMAC of a fixed
// label under the secret, never the secret itself, and when the first
// gateway wrote it.
type SecretCheck struct {
	// Value is keying.SecretCheck of the secret.
	Value []byte
	// MadeAt is when it was written (the store's clock where it has one).
	MadeAt time.Time
}
