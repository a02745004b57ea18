package signature

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"strings"

	"github.com/idemgate/idemgate/config"
)

// hmacScheme is the generic scheme: one signature in a named header,
// after an optional prefix, hex or base64, of the HMAC (SHA-256 or
// SHA-512) of the signed template filled with the body and, when it has
// {timestamp}, the unix seconds of the timestamp header. The secret is
// the key as it is.
type hmacScheme struct {
	headerName      string
	prefix          string
	base64          bool
	hash            func() hash.Hash
	size            int
	parts           []string // literal text, "{body}" and "{timestamp}"
	timestampHeader string   // "" when nothing signs a time
}

func newHMAC(rule *config.SignatureRule) (*hmacScheme, error) {
	h, ok := hashes[rule.Algorithm]
	if !ok {
		return nil, fmt.Errorf("signature: unknown algorithm %q", rule.Algorithm)
	}
	if rule.Encoding != "hex" && rule.Encoding != "base64" {
		return nil, fmt.Errorf("signature: unknown encoding %q", rule.Encoding)
	}
	s := &hmacScheme{headerName: rule.Header, prefix: rule.Prefix, base64: rule.Encoding == "base64",
		hash: h, size: h().Size(), parts: rule.SignedParts(), timestampHeader: rule.TimestampHeader}
	if s.headerName == "" || len(s.parts) == 0 {
		return nil, fmt.Errorf("signature: the hmac scheme needs a header and a signed template")
	}
	return s, nil
}

func (s *hmacScheme) read(v string, h http.Header, _ string, body []byte) (message, Reason) {
	enc, ok := strings.CutPrefix(v, s.prefix)
	if !ok {
		return message{}, Malformed
	}
	sig, err := s.decode(enc)
	if err != nil || len(sig) != s.size {
		return message{}, Malformed
	}
	m := message{sigs: [][]byte{sig}}
	var ts string
	var reason Reason
	if s.timestampHeader != "" {
		switch ts, reason = header(h, s.timestampHeader); reason {
		case Missing:
			return message{}, Timestamp
		case Malformed:
			return message{}, Malformed
		}
		if m.at, ok = unixSeconds(ts); !ok {
			return message{}, Malformed
		}
		m.timed = true
	}
	for _, p := range s.parts {
		switch p {
		case "{body}":
			m.parts = append(m.parts, body)
		case "{timestamp}":
			m.parts = append(m.parts, []byte(ts))
		default:
			m.parts = append(m.parts, []byte(p))
		}
	}
	return m, ""
}

// decode reads a signature in the scheme's encoding: hex (either case),
// or base64 with or without its padding.
func (s *hmacScheme) decode(enc string) ([]byte, error) {
	if !s.base64 {
		return hex.DecodeString(enc)
	}
	if strings.HasSuffix(enc, "=") {
		return base64.StdEncoding.DecodeString(enc)
	}
	return base64.RawStdEncoding.DecodeString(enc)
}

func (s *hmacScheme) header() string { return s.headerName }

func (s *hmacScheme) key(secret string) ([]byte, error) { return []byte(secret), nil }
