package signature

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// stripe is Stripe's scheme: a Stripe-Signature header of
// comma-separated items, t=<unix seconds> once and v1=<hex> for each
// signature (several during a secret rotation; v0 and other schemes are
// ignored), over "<t>.<body>" with HMAC-SHA256 keyed by the endpoint's
// signing secret (whsec_…) as it is.
type stripe struct{}

const stripeHeader = "Stripe-Signature"

func (stripe) read(v string, h http.Header, _ string, body []byte) (message, Reason) {
	var m message
	t, seenT := "", false
	for _, item := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		switch {
		case !ok:
			return message{}, Malformed
		case k == "t" && seenT:
			return message{}, Malformed
		case k == "t":
			t, seenT = val, true
		case k == "v1":
			if len(m.sigs) == MaxSignatures {
				return message{}, Malformed
			}
			if sig, err := hex.DecodeString(val); err == nil && len(sig) == sha256.Size {
				m.sigs = append(m.sigs, sig)
			}
		}
	}
	var ok bool
	switch m.at, ok = unixSeconds(t); {
	case !seenT:
		return message{}, Timestamp
	case !ok || len(m.sigs) == 0:
		return message{}, Malformed
	}
	m.timed, m.parts = true, [][]byte{[]byte(t), dot, body}
	return m, ""
}

// key is the secret as it is: Stripe keys the HMAC with the whole
// whsec_… string.
func (stripe) header() string { return stripeHeader }

func (stripe) key(secret string) ([]byte, error) { return []byte(secret), nil }
