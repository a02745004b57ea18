package caddymodule

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/sealed"
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
	if keeping := h.keepingRoutes(); h.Secret == "" && keeping != "" {
		return fmt.Errorf("idempotency: keep_request (%s) needs the secret option in the config, e.g. secret {env.IDEMGATE_SECRET} or {file.PATH}: "+
			"kept requests are sealed under a key derived from it, and a key derived from the secret the store keeps would sit beside what it seals",
			keeping)
	}
	return nil
}

// keepingRoutes names the routes that keep requests ("route a" or
// "routes a, b"), or is "" when none does.
func (h *Handler) keepingRoutes() string {
	var names []string
	for _, rt := range h.routes {
		if rt.KeepRequest {
			names = append(names, rt.Name)
		}
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return "route " + names[0]
	}
	return "routes " + strings.Join(names, ", ")
}

// checkSecretNotKept refuses a configured secret that is the one the
// store keeps (copied from <key_prefix>secret to keep the record ids)
// when routes keep requests: the sealing key would again sit beside what
// it seals. A store that cannot be asked now is let be, with a warning.
func (h *Handler) checkSecretNotKept(ctx context.Context, secret []byte) error {
	keeping := h.keepingRoutes()
	if keeping == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, secretTimeout)
	defer cancel()
	kept, err := h.store.KeptSecret(ctx)
	if err != nil {
		h.logger.Warn("could not check that the configured secret is not the one the store keeps", zap.Error(err))
		return nil
	}
	defer clear(kept)
	if len(kept) > 0 && subtle.ConstantTimeCompare(kept, secret) == 1 {
		return fmt.Errorf("keep_request (%s) needs a secret the store does not keep: the configured secret is the one kept in the store, "+
			"so a key derived from it would sit beside the requests it seals; configure a new secret (record ids change with it)", keeping)
	}
	return nil
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
	if !configured {
		return nil
	}
	if err := h.checkSecretNotKept(ctx, secret); err != nil {
		return err
	}
	h.seal, err = sealed.New(secret)
	return err
}
