package store

import (
	"cmp"
	"fmt"
	"time"
)

// The hold: the claim does not know whether its call took effect, and
// the record is held as outcome unknown for a check or an operator.

// CheckMarkUnknown validates a MarkUnknown's arguments and returns its
// reason and hold TTL.
func CheckMarkUnknown(id, reason string, holdTTL time.Duration) (string, time.Duration, error) {
	holdTTL = cmp.Or(holdTTL, DefaultHoldTTL)
	if holdTTL < 0 {
		return "", 0, fmt.Errorf("%w: negative hold TTL", ErrInvalidArgument)
	}
	if reason == "" {
		reason = "unknown"
	}
	if !ValidID(id) {
		return "", 0, ErrInvalidID
	}
	return reason, holdTTL, nil
}

// MarkUnknown is the record held as outcome unknown by its claim
// (token); a completed record is never demoted. Nil when nothing
// changes.
func (s *Stored) MarkUnknown(now int64, token, reason string, holdTTL time.Duration) *Stored {
	if s == nil || s.Token != token || s.State == StateCompleted {
		return nil
	}
	r := s.Clone()
	r.State, r.Reason = StateUnknown, reason
	r.ExpireAt = now + Millis(holdTTL)
	r.ScheduleFirstCheck(now)
	return r
}

// ScheduleFirstCheck makes a record that was just held due for its first
// scheduled check its After from now.
func (s *Stored) ScheduleFirstCheck(now int64) {
	if !s.Check.IsZero() {
		s.NextCheck = time.UnixMilli(now + Millis(s.Check.After))
	}
}
