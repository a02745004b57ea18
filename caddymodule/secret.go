package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/keying"
)

// secretTimeout bounds reading (or creating) the secret kept in the store
// when a config is provisioned.
const secretTimeout = 5 * time.Second

// deploymentSecret resolves the configured secret's placeholders. It
// returns nil when no secret is configured. Errors never contain the
// value.
func (h *Handler) deploymentSecret() ([]byte, error) {
	if h.Secret == "" {
		return nil, nil
	}
	s := caddy.NewReplacer().ReplaceAll(h.Secret, "")
	switch {
	case s == "":
		return nil, errors.New("secret is empty after its placeholders were replaced (is the environment variable set?)")
	case len(s) < keying.MinSecretLen:
		return nil, fmt.Errorf("secret is %d bytes, at least %d needed", len(s), keying.MinSecretLen)
	}
	return []byte(s), nil
}

// provisionIDKey sets up the derivation of record ids: HMAC-SHA-256 under
// the configured secret, or else under the one kept in the record store
// (created there by the first gateway, read once per store connection),
// so that every instance sharing the store derives the same ids.
func (h *Handler) provisionIDKey(ctx context.Context) error {
	secret, err := h.deploymentSecret()
	if err != nil {
		return err
	}
	if secret == nil {
		ctx, cancel := context.WithTimeout(ctx, secretTimeout)
		defer cancel()
		if secret, err = h.store.Secret(ctx); err != nil {
			return err
		}
	}
	defer clear(secret)
	if h.ids, err = keying.NewIDKey(secret); err != nil {
		return err
	}
	h.seal, err = newSealer(secret)
	return err
}
