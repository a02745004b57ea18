package signature

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// twilio is Twilio's scheme: X-Twilio-Signature, the base64 HMAC-SHA1,
// keyed by the account's auth token, of the full URL Twilio requested
// (with its query) followed, for a form body, by each parameter's name
// and value, names sorted, a repeated name's distinct values sorted.
// For a JSON body the URL carries bodySHA256, the body's hex SHA-256,
// and nothing follows the URL. As Twilio's own libraries do, the URL
// verifies with and without its scheme's default port. No timestamp.
type twilio struct{}

const (
	twilioHeader  = "X-Twilio-Signature"
	twilioBodySum = "bodySHA256"
)

func (twilio) read(v string, h http.Header, rawURL string, body []byte) (message, Reason) {
	sig, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(sig) != sha1.Size || rawURL == "" {
		return message{}, Malformed
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return message{}, Malformed
	}
	var params []byte
	if q, _ := url.ParseQuery(u.RawQuery); q.Has(twilioBodySum) {
		sum := sha256.Sum256(body)
		if subtle.ConstantTimeCompare([]byte(strings.ToLower(q.Get(twilioBodySum))), []byte(hex.EncodeToString(sum[:]))) != 1 {
			return message{}, Mismatch
		}
	} else if isForm(h) {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return message{}, Malformed
		}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range form {
				if !yield(k) {
					return
				}
			}
		}) {
			values := slices.Compact(slices.Sorted(slices.Values(form[name])))
			for _, val := range values {
				params = append(append(params, name...), val...)
			}
		}
	}
	m := message{sigs: [][]byte{sig}, parts: [][]byte{[]byte(rawURL), params}}
	if other := otherPort(u, rawURL); other != "" {
		m.alt = [][]byte{[]byte(other), params}
	}
	return m, ""
}

// isForm reports whether the request's body is an URL-encoded form.
func isForm(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "application/x-www-form-urlencoded"
}

// otherPort is rawURL with its scheme's default port when it has none,
// or without its port when it has the default one; "" otherwise.
func otherPort(u *url.URL, rawURL string) string {
	def := map[string]string{"https": "443", "http": "80"}[u.Scheme]
	if def == "" {
		return ""
	}
	prefix := u.Scheme + "://"
	rest, ok := strings.CutPrefix(rawURL, prefix)
	if !ok {
		return ""
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	switch u.Port() {
	case "":
		return prefix + authority + ":" + def + tail
	case def:
		return prefix + strings.TrimSuffix(authority, ":"+def) + tail
	}
	return ""
}

func (twilio) header() string { return twilioHeader }

func (twilio) key(secret string) ([]byte, error) { return []byte(secret), nil }
