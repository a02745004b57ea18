package redis

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/store"
)

// SecretCheckKey returns the Redis key that keeps the check value of the
// deployment secret: prefix + "secretcheck", a plain string key (no TTL,
// no hash tag) outside the record and index key space, as SecretKey. Its
// value is "v1 <ms since the epoch> <hex check value>".
func (s *Store) SecretCheckKey() string { return s.prefix + "secretcheck" }

// KeepSecretCheck keeps check under SecretCheckKey when no check value is
// kept yet (SET NX, then read back in the same round trip: one key, so
// Cluster-safe), and returns the one kept. The first answer is kept for
// the life of the Store, so that config reloads never need Redis for it.
func (s *Store) KeepSecretCheck(ctx context.Context, check []byte) (store.SecretCheck, error) {
	s.secret.mu.Lock()
	defer s.secret.mu.Unlock()
	if s.secret.check.Value != nil {
		return s.secret.check, nil
	}
	key := s.SecretCheckKey()
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	pipe := s.client.Pipeline()
	pipe.SetNX(ctx, key, "v1 "+strconv.FormatInt(time.Now().UnixMilli(), 10)+" "+hex.EncodeToString(check), 0)
	pipe.Persist(ctx, key)
	get := pipe.Get(ctx, key)
	_, err := pipe.Exec(ctx)
	val, gerr := get.Result()
	switch {
	case errors.Is(gerr, goredis.Nil):
		return store.SecretCheck{}, fmt.Errorf("store: the secret's check value %s vanished right after it was written", key)
	case gerr != nil:
		return store.SecretCheck{}, fmt.Errorf("store: the secret's check value %s: %w", key, gerr)
	case err != nil:
		return store.SecretCheck{}, fmt.Errorf("store: the secret's check value %s: %w", key, err)
	}
	c, err := parseSecretCheck(val)
	if err != nil {
		return store.SecretCheck{}, fmt.Errorf("store: the secret's check value %s: %w: delete the key only if every instance uses the same secret", key, err)
	}
	s.secret.check = c
	return c, nil
}

// parseSecretCheck reads the value of SecretCheckKey.
func parseSecretCheck(val string) (store.SecretCheck, error) {
	f := strings.Fields(val)
	if len(f) != 3 || f[0] != "v1" {
		return store.SecretCheck{}, errors.New(`not "v1 <ms> <hex>"`)
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return store.SecretCheck{}, fmt.Errorf("its time: %w", err)
	}
	v, err := hex.DecodeString(f[2])
	if err != nil || len(v) == 0 {
		return store.SecretCheck{}, errors.New("its value is not hex")
	}
	return store.SecretCheck{Value: v, MadeAt: time.UnixMilli(ms)}, nil
}

// Where names the store in messages: its address (password redacted,
// as the config gave it, or else the addresses dialled) and key prefix.
func (s *Store) Where() string {
	where := s.where
	if where == "" {
		where = strings.Join(s.addrs, ",")
	}
	return "Redis " + where + " (key prefix " + strconv.Quote(s.prefix) + ")"
}
