package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// square is Square's scheme: X-Square-Hmacsha256-Signature, the base64
// HMAC-SHA256 of the notification URL (as the subscription names it)
// followed by the body, keyed by the subscription's signature key as it
// is. Square signs no timestamp.
type square struct{}

const squareHeader = "X-Square-Hmacsha256-Signature"

func (square) read(v string, _ http.Header, url string, body []byte) (message, Reason) {
	sig, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(sig) != sha256.Size || url == "" {
		return message{}, Malformed
	}
	return message{parts: [][]byte{[]byte(url), body}, sigs: [][]byte{sig}}, ""
}

func (square) header() string { return squareHeader }

func (square) key(secret string) ([]byte, error) { return []byte(secret), nil }
