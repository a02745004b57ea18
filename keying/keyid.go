package keying

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"
)

// MinSecretLen is the shortest deployment secret NewIDKey accepts, in
// bytes.
const MinSecretLen = 16

// ErrShortSecret is wrapped by the error NewIDKey returns for a secret
// shorter than MinSecretLen.
var ErrShortSecret = errors.New("deployment secret is too short")

const (
	keyDomain     = "idemgate-key-v2\x00"
	payloadDomain = "idemgate-payload-v1\x00"
)

// IDKey derives record ids under a deployment secret. It is safe for
// concurrent use; make one per secret and keep it.
type IDKey struct {
	macs sync.Pool // of *idScratch, each with an HMAC keyed with the secret
}

// idScratch is one goroutine's HMAC and buffers: keying an HMAC and
// allocating its state is most of its cost, so they are made once and
// reused (Reset restores the keyed state without rehashing the key).
type idScratch struct {
	mac hash.Hash
	msg []byte
	sum [sha256.Size]byte
}

// NewIDKey returns the id deriver for secret, which must be at least
// MinSecretLen bytes. The secret is copied; it is never logged or shown.
func NewIDKey(secret []byte) (*IDKey, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d bytes, at least %d needed", ErrShortSecret, len(secret), MinSecretLen)
	}
	key := append([]byte(nil), secret...)
	k := &IDKey{}
	k.macs.New = func() any {
		return &idScratch{mac: hmac.New(sha256.New, key), msg: make([]byte, 0, 384)}
	}
	return k, nil
}

// KeyID returns the record id of a key: the first 32 lowercase hex digits
// of HMAC-SHA-256(secret, "idemgate-key-v2\x00" + operation + "\x00" +
// scope[:] + "\x00" + key). It is shown to operators and used in store key
// names instead of the key; without the secret nobody can test a guessed
// key or scope value (an Authorization header) against it.
func (k *IDKey) KeyID(operation string, scope [32]byte, key string) string {
	return k.id(keyDomain, operation, scope, key)
}

// PayloadID returns the id under which an operation completed on a
// route with a same-payload window is found by its payload: as KeyID,
// under a domain of its own, of the request's fingerprint instead of its
// key. Two keys of one operation, scope and payload have the same
// PayloadID; it is never equal to a record id.
func (k *IDKey) PayloadID(operation string, scope [32]byte, fingerprint string) string {
	return k.id(payloadDomain, operation, scope, fingerprint)
}

func (k *IDKey) id(domain, operation string, scope [32]byte, value string) string {
	s := k.macs.Get().(*idScratch)
	msg := append(s.msg[:0], domain...)
	msg = append(msg, operation...)
	msg = append(msg, 0)
	msg = append(msg, scope[:]...)
	msg = append(msg, 0)
	msg = append(msg, value...)
	s.mac.Reset()
	s.mac.Write(msg)
	sum := s.mac.Sum(s.sum[:0])
	var out [32]byte
	hex.Encode(out[:], sum[:16])
	if cap(msg) <= 4<<10 {
		s.msg = msg
	}
	k.macs.Put(s)
	return string(out[:])
}
