package redis

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/store"
)

// minSecretLen is the shortest secret Secret accepts from Redis, as
// keying.MinSecretLen.
const minSecretLen = 16

// secretCache keeps the deployment secret once it has been read, so that
// config reloads never need Redis for it and every config sharing the
// connection derives the same ids.
type secretCache struct {
	mu    sync.Mutex
	val   []byte
	check store.SecretCheck // the kept check value, once read (see KeepSecretCheck)
}

// SecretKey returns the Redis key that keeps the deployment secret:
// prefix + "secret". It is a plain string key (no TTL), outside the record
// and index key space (no hash tag), so ScanIDs and List never see it.
func (s *Store) SecretKey() string { return s.prefix + "secret" }

// KeptSecret returns the deployment secret kept in Redis under
// SecretKey, or nil when none is kept; it never creates one. It is never
// logged; errors never contain it.
func (s *Store) KeptSecret(ctx context.Context) ([]byte, error) {
	s.secret.mu.Lock()
	defer s.secret.mu.Unlock()
	if s.secret.val != nil {
		return bytes.Clone(s.secret.val), nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	val, err := s.client.Get(ctx, s.SecretKey()).Bytes()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("store: deployment secret %s: %w", s.SecretKey(), err)
	}
	return val, nil
}

// Secret returns the deployment secret kept in Redis under SecretKey,
// creating it the first time: 32 random bytes, hex-encoded, written with
// SET NX, then read back in the same round trip (one key, so
// Cluster-safe). Every gateway that shares the store (and key prefix)
// therefore gets the same secret, whichever wrote it. The value is the hex
// text itself: copied into the `secret` option it gives the same record
// ids. The first successful answer is kept for the life of the Store.
//
// A value that an operator stored by hand is used as it is, but must be at
// least 16 bytes. The secret is never logged; errors never contain it.
func (s *Store) Secret(ctx context.Context) ([]byte, error) {
	s.secret.mu.Lock()
	defer s.secret.mu.Unlock()
	if s.secret.val != nil {
		return bytes.Clone(s.secret.val), nil
	}
	key := s.SecretKey()
	if s.evict != nil {
		if policy, evictable := s.evict.secretEvictable(); evictable {
			return nil, fmt.Errorf("store: the deployment secret kept in Redis under %s could be evicted under maxmemory-policy %s "+
				"(and a new one would orphan every record): configure the secret option, or use noeviction or a volatile-* policy", key, policy)
		}
	}
	// A failover or an operator may remove the key between the SET and
	// the GET: then try again, a few times.
	for range 3 {
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return nil, fmt.Errorf("store: deployment secret: %w", err)
		}
		cctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		pipe := s.client.Pipeline()
		pipe.SetNX(cctx, key, hex.EncodeToString(raw[:]), 0)
		// The secret never expires: a TTL set by hand is removed.
		pipe.Persist(cctx, key)
		get := pipe.Get(cctx, key)
		_, err := pipe.Exec(cctx)
		cancel()
		val, gerr := get.Bytes()
		switch {
		case errors.Is(gerr, goredis.Nil):
			continue
		case gerr != nil:
			return nil, fmt.Errorf("store: deployment secret %s: %w", key, gerr)
		case err != nil:
			return nil, fmt.Errorf("store: deployment secret %s: %w", key, err)
		case len(val) < minSecretLen:
			return nil, fmt.Errorf("store: the deployment secret kept in Redis under %s is %d bytes, at least %d needed: delete the key or store a longer value",
				key, len(val), minSecretLen)
		}
		s.secret.val = val
		if s.evict != nil {
			s.evict.storedSecret.Store(true)
		}
		return bytes.Clone(val), nil
	}
	return nil, fmt.Errorf("store: deployment secret %s: the key vanished right after it was written, three times", key)
}
