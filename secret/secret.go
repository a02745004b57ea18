// Package secret is the deployment secret: resolved from the config's
// placeholders (or else the one the record store keeps), from which the
// record ids and, for kept requests, the sealing key derive; and the
// checks that keep the sealing key away from what it seals.
package secret

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/sealed"
	"github.com/idemgate/idemgate/store"
)

// Timeout bounds reading (or creating) the secret kept in the store
// when a config is provisioned.
const Timeout = 5 * time.Second

// Resolve resolves the configured secret's placeholders. It returns nil when no secret is configured. Errors never contain the
// value.
func Resolve(configured string) ([]byte, error) {
	if configured == "" {
		return nil, nil
	}
	s := caddy.NewReplacer().ReplaceAll(configured, "")
	switch {
	case s == "":
		return nil, errors.New("secret is empty after its placeholders were replaced (is the environment variable set?)")
	case len(s) < keying.MinSecretLen:
		return nil, fmt.Errorf("secret is %d bytes, at least %d needed", len(s), keying.MinSecretLen)
	}
	return []byte(s), nil
}

// NeededToKeep refuses a config whose routes keep requests (keeping:
// "route a", "routes a, b"; "" when none does)
// (keep_request) without a secret of its own: kept requests are sealed
// under a key derived from the configured secret alone, since one
// derived from the secret the store keeps would sit beside what it seals
// (anyone who can read the store could open them).
func NeededToKeep(configured, keeping string) error {
	if configured == "" && keeping != "" {
		return fmt.Errorf("idempotency: keep_request (%s) needs the secret option in the config, e.g. secret {env.IDEMGATE_SECRET} or {file.PATH}: "+
			"kept requests are sealed under a key derived from it, and a key derived from the secret the store keeps would sit beside what it seals",
			keeping)
	}
	return nil
}

// notKept refuses a configured secret that is the one the
// store keeps (copied from <key_prefix>secret to keep the record ids)
// when routes keep requests: the sealing key would again sit beside what
// it seals. A store that cannot be asked now is let be, with a warning.
func notKept(ctx context.Context, st store.Engine, secret []byte, keeping string, logger *zap.Logger) error {
	if keeping == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	kept, err := st.KeptSecret(ctx)
	if err != nil {
		logger.Warn("could not check that the configured secret is not the one the store keeps", zap.Error(err))
		return nil
	}
	defer clear(kept)
	if len(kept) > 0 && subtle.ConstantTimeCompare(kept, secret) == 1 {
		return fmt.Errorf("keep_request (%s) needs a secret the store does not keep: the configured secret is the one kept in the store, "+
			"so a key derived from it would sit beside the requests it seals; configure a new secret (record ids change with it)", keeping)
	}
	return nil
}

// Provision sets up the derivation of record ids: HMAC-SHA-256 under
// the configured secret, or else under the one kept in the record store
// (created there by the first gateway, read once per store connection),
// so that every instance sharing the store derives the same ids; and,
// with a configured secret, the sealing of kept requests under a key
// derived from it.
func Provision(ctx context.Context, configured string, st store.Engine, keeping string, logger *zap.Logger) (*keying.IDKey, *sealed.Sealer, error) {
	secret, err := Resolve(configured)
	if err != nil {
		return nil, nil, err
	}
	if secret == nil {
		ctx, cancel := context.WithTimeout(ctx, Timeout)
		defer cancel()
		if secret, err = st.Secret(ctx); err != nil {
			return nil, nil, err
		}
		defer clear(secret)
		ids, err := keying.NewIDKey(secret)
		if err != nil {
			return nil, nil, err
		}
		return ids, nil, Agrees(ctx, st, secret, false)
	}
	defer clear(secret)
	ids, err := keying.NewIDKey(secret)
	if err != nil {
		return nil, nil, err
	}
	// The more specific refusal first: the store's own secret copied
	// into the config of keep_request routes.
	if err := notKept(ctx, st, secret, keeping, logger); err != nil {
		return nil, nil, err
	}
	if err := Agrees(ctx, st, secret, true); err != nil {
		return nil, nil, err
	}
	seal, err := sealed.New(secret)
	if err != nil {
		return nil, nil, err
	}
	return ids, seal, nil
}
