package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// checkKeepSecret refuses a config whose routes keep requests
// (keep_request) without a secret of its own: kept requests are sealed
// under a key derived from the configured secret alone, since one
// derived from the secret the store keeps would sit beside what it seals
// (anyone who can read the store could open them).
func (h *Handler) checkKeepSecret() error {
	if h.Secret != "" {
		return nil
	}
	var keeping []string
	for _, rt := range h.routes {
		if rt.KeepRequest {
			keeping = append(keeping, rt.Name)
		}
	}
	if len(keeping) == 0 {
		return nil
	}
	which := "route "
	if len(keeping) > 1 {
		which = "routes "
	}
	return fmt.Errorf("idempotency: keep_request (%s) needs the secret option in the config, e.g. secret {env.IDEMGATE_SECRET} or {file.PATH}: "+
		"kept requests are sealed under a key derived from it, and a key derived from the secret the store keeps would sit beside what it seals",
		which+strings.Join(keeping, ", "))
}

// provisionIDKey sets up the derivation of record ids: HMAC-SHA-256 under
// the configured secret, or else under the one kept in the record store
// (created there by the first gateway, read once per store connection),
// so that every instance sharing the store derives the same ids; and,
// with a configured secret, the sealing of kept requests under a key
// derived from it.
func (h *Handler) provisionIDKey(ctx context.Context) error {
	secret, err := h.deploymentSecret()
	if err != nil {
		return err
	}
	configured := secret != nil
	if !configured {
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
	if configured {
		h.seal, err = newSealer(secret)
	}
	return err
}
