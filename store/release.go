package store

import (
	"cmp"
	"fmt"
	"time"
)

// The release: the claim says its call had no effect, and the next
// claim executes again.

// CheckRelease validates a Release's arguments and returns its TTL.
func CheckRelease(id string, ttl time.Duration) (time.Duration, error) {
	ttl = cmp.Or(ttl, DefaultTTL)
	if ttl < 0 {
		return 0, fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	if !ValidID(id) {
		return 0, ErrInvalidID
	}
	return ttl, nil
}

// Release is the record released by its claim (token): the next claim
// executes again. Nil when s does not exist or token does not hold it.
func (s *Stored) Release(now int64, token string, ttl time.Duration) *Stored {
	if s == nil || s.Token != token {
		return nil
	}
	r := s.Clone()
	r.ClearResult()
	r.State, r.Reason = StateReleased, ReasonNotDone
	r.ExpireAt = now + Millis(ttl)
	return r
}
