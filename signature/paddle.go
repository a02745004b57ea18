package signature

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// paddle is Paddle's scheme: a Paddle-Signature header of
// semicolon-separated items, ts=<unix seconds> once and h1=<hex> for each
// signature (several while a secret is rotated), over "<ts>:<body>" with
// HMAC-SHA256 keyed by the notification destination's secret as it is.
type paddle struct{}

const paddleHeader = "Paddle-Signature"

var colon = []byte(":")

func (paddle) read(v string, _ http.Header, _ string, body []byte) (message, Reason) {
	var m message
	ts, seenTS := "", false
	for _, item := range strings.Split(v, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		switch {
		case !ok:
			return message{}, Malformed
		case k == "ts" && seenTS:
			return message{}, Malformed
		case k == "ts":
			ts, seenTS = val, true
		case k == "h1":
			if len(m.sigs) == MaxSignatures {
				return message{}, Malformed
			}
			if sig, err := hex.DecodeString(val); err == nil && len(sig) == sha256.Size {
				m.sigs = append(m.sigs, sig)
			}
		}
	}
	var ok bool
	switch m.at, ok = unixSeconds(ts); {
	case !seenTS:
		return message{}, Timestamp
	case !ok || len(m.sigs) == 0:
		return message{}, Malformed
	}
	m.timed, m.parts = true, [][]byte{[]byte(ts), colon, body}
	return m, ""
}

func (paddle) header() string { return paddleHeader }

func (paddle) key(secret string) ([]byte, error) { return []byte(secret), nil }
