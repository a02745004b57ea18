package secret

import (
	"context"
	"crypto/hmac"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// Agrees checks secret against the check value the store keeps
// (keying.SecretCheck of the secret its records were made under),
// keeping secret's when the store keeps none yet. Another value means
// this gateway would derive other record ids than the gateways before
// it, so a retry that reaches it would execute again: the error refuses
// the config, naming the store and when its check value was made.
// configured says whether secret is the configured one or the one the
// store keeps. An error of the store refuses it too: nothing may run
// unchecked.
func Agrees(ctx context.Context, st store.Engine, secret []byte, configured bool) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	mine := keying.SecretCheck(secret)
	kept, err := st.KeepSecretCheck(ctx, mine)
	if err != nil {
		return fmt.Errorf("check the secret against %s: %w", st.Where(), err)
	}
	if hmac.Equal(kept.Value, mine) {
		return nil
	}
	which := "the configured `secret`"
	if !configured {
		which = "the secret the store keeps (no `secret` is configured)"
	}
	return fmt.Errorf("%s holds records made under another secret (its check value was made at %s): "+
		"%s is not that secret, so this gateway would derive other record ids and execute every retry again; "+
		"every instance of a store must use the same `secret` (or all none, sharing the one the store keeps); "+
		"to change the secret on purpose, start on a new store, key prefix or schema (see docs/secret.md)",
		st.Where(), kept.MadeAt.UTC().Format(time.RFC3339), which)
}
