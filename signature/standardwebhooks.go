package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
)

// standardWebhooks is the Standard Webhooks scheme (spec 1.0.0): the
// headers webhook-id, webhook-timestamp (unix seconds) and
// webhook-signature, a space-separated list of "v1,<base64>" signatures
// (several during a secret rotation; other versions, such as the
// asymmetric v1a, are ignored), each the HMAC-SHA256 of
// "<id>.<timestamp>.<body>" keyed by the secret's base64-decoded bytes.
type standardWebhooks struct{}

const (
	swID        = "Webhook-Id"
	swTimestamp = "Webhook-Timestamp"
	swSignature = "Webhook-Signature"
	swPrefix    = "whsec_"
)

func (standardWebhooks) read(v string, h http.Header, _ string, body []byte) (message, Reason) {
	id, reason := header(h, swID)
	if reason != "" {
		return message{}, Malformed // the id is signed: without it nothing can match
	}
	ts, reason := header(h, swTimestamp)
	switch {
	case reason == Missing:
		return message{}, Timestamp
	case reason != "":
		return message{}, Malformed
	}
	var m message
	var ok bool
	if m.at, ok = unixSeconds(ts); !ok {
		return message{}, Malformed
	}
	entries := strings.Fields(v)
	if len(entries) > MaxSignatures {
		return message{}, Malformed
	}
	for _, e := range entries {
		if b64, ok := strings.CutPrefix(e, "v1,"); ok {
			if sig, err := base64.StdEncoding.DecodeString(b64); err == nil && len(sig) == sha256.Size {
				m.sigs = append(m.sigs, sig)
			}
		}
	}
	if len(m.sigs) == 0 {
		return message{}, Malformed
	}
	m.timed, m.parts = true, [][]byte{[]byte(id), dot, []byte(ts), dot, body}
	return m, ""
}

// key decodes a whsec_<base64> secret (the prefix may be left out).
func (standardWebhooks) header() string { return swSignature }

func (standardWebhooks) key(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, swPrefix))
	switch {
	case err != nil:
		return nil, errors.New("is not a Standard Webhooks secret: want whsec_ and base64")
	case len(key) == 0:
		return nil, errors.New("is an empty Standard Webhooks secret")
	}
	return key, nil
}
