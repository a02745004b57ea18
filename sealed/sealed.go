// Package sealed keeps a request for an operator's re-drive
// (keep_request): what the upstream needs to run the operation again,
// without the caller's credentials (an allowlist of headers), sealed at
// rest under a key derived from the configured secret.
package sealed

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/idemgate/idemgate/config"
)

// Request is a request as a record keeps it for a re-drive
// (keep_request): what the upstream needs to run the operation again,
// without the caller's credentials.
type Request struct {
	Method string      `json:"m"`
	Target string      `json:"t"` // the request target as received: path and query
	Host   string      `json:"o,omitempty"`
	Header http.Header `json:"h,omitempty"`
	Body   []byte      `json:"b,omitempty"`
	// Key is the derived key, forwarded again in forward_key_header.
	Key string `json:"k"`
}

// sealInfo names the key derived from the configured secret for kept
// requests; a new format gets a new name.
const sealInfo = "idemgate keep_request AES-256-GCM v1"

// sealVersion is the first byte of a sealed request.
const sealVersion = 1

// Sealer encrypts kept requests at rest: AES-256-GCM under a key derived
// with HKDF-SHA-256 from the secret given in the config (never the one a
// store keeps, which sits beside what it would seal), a random nonce per
// request, and the record id as additional data, so a sealed request
// opens only as the request of its own record.
type Sealer struct{ aead cipher.AEAD }

// New is the sealer under a key derived from secret.
func New(secret []byte) (*Sealer, error) {
	key, err := hkdf.Key(sha256.New, secret, nil, sealInfo, 32)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts kr for record id.
func (s *Sealer) Seal(id string, kr *Request) ([]byte, error) {
	plain, err := json.Marshal(kr)
	if err != nil {
		return nil, err
	}
	defer clear(plain)
	n := s.aead.NonceSize()
	out := make([]byte, 1+n, 1+n+len(plain)+s.aead.Overhead())
	out[0] = sealVersion
	_, _ = rand.Read(out[1:]) // never fails (crypto/rand documents it)
	return s.aead.Seal(out, out[1:1+n], plain, []byte(id)), nil
}

// ErrUnsealable: the kept request does not open under the key derived
// from the configured secret: it was sealed under another key (by an
// earlier version, under the secret the store keeps; or before the
// configured secret was changed), is another record's, or is damaged.
// Nothing can run it again; the client's retry can, once released.
var ErrUnsealable = errors.New("its kept request does not open under the key derived from the configured secret: " +
	"it was sealed under another key (by an earlier version, under the secret the store keeps, or before the secret was changed) or is damaged, " +
	"so it cannot be run again: release the record and let the client retry")

// Open decrypts the request kept on record id.
func (s *Sealer) Open(id string, sealed []byte) (*Request, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != sealVersion {
		return nil, ErrUnsealable
	}
	plain, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(id))
	if err != nil {
		return nil, ErrUnsealable
	}
	defer clear(plain)
	var kr Request
	if err := json.Unmarshal(plain, &kr); err != nil {
		return nil, ErrUnsealable
	}
	return &kr, nil
}

// alwaysKept are the request headers every kept request carries when
// the request has them: what the upstream needs to read the body and
// shape its answer.
var alwaysKept = []string{"Content-Type", "Content-Encoding", "Accept"}

// HeaderSet is the allowlist of a route's kept requests: alwaysKept,
// the headers the route's key templates read (its fingerprint reads
// none: body, path and query only) and its keep_headers; never one its
// scope reads (what identifies the caller). Everything else a request
// brings (the caller's credentials, proofs and signatures bound to the
// original delivery such as DPoP or a webhook's HMAC) stays out.
func HeaderSet(res *config.Resolved) map[string]bool {
	set := make(map[string]bool, len(alwaysKept)+len(res.KeepHeaders))
	for _, name := range alwaysKept {
		set[name] = true
	}
	for _, t := range res.Key {
		for _, name := range t.Headers() {
			set[name] = true
		}
	}
	for _, name := range res.KeepHeaders {
		set[name] = true
	}
	for _, t := range res.Scope {
		for _, name := range t.Headers() {
			delete(set, name)
		}
	}
	return set
}

// Headers are the request's headers a kept request carries: those on
// the route's allowlist set (see HeaderSet).
func Headers(set map[string]bool, h http.Header) http.Header {
	out := make(http.Header, len(set))
	for name := range set {
		if vv, ok := h[name]; ok {
			out[name] = append([]string(nil), vv...)
		}
	}
	return out
}
