package signature

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// github is GitHub's scheme: X-Hub-Signature-256: sha256=<hex> of the
// HMAC-SHA256 of the raw body, keyed by the webhook's secret as it is.
// GitHub signs no timestamp.
type github struct{}

const (
	githubHeader = "X-Hub-Signature-256"
	githubPrefix = "sha256="
)

func (github) read(v string, h http.Header, _ string, body []byte) (message, Reason) {
	hexSig, ok := strings.CutPrefix(v, githubPrefix)
	sig, err := hex.DecodeString(hexSig)
	if !ok || err != nil || len(sig) != sha256.Size {
		return message{}, Malformed
	}
	return message{parts: [][]byte{body}, sigs: [][]byte{sig}}, ""
}

func (github) header() string { return githubHeader }

func (github) key(secret string) ([]byte, error) { return []byte(secret), nil }
