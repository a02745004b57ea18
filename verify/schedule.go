package verify

import (
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// Schedule starts the checks of a record that claim c left held on route
// rt: the first `after` the hold, then every `every`, until the record is
// resolved or its attempts are used up. Only a timer waits for a check;
// the handler's store stays open until the schedule ends.
func (v *Verifier) Schedule(rt *config.Resolved, c *store.Claim) {
	if rt.Verify == nil || rt.Verify.Attempts == 0 {
		return
	}
	v.use.Enter()
	s := &checkSchedule{v: v, rt: rt, held: c.Fence()}
	s.timer = time.AfterFunc(rt.Verify.After, s.run)
}

// checkSchedule is the scheduled checks of one held record.
type checkSchedule struct {
	v        *Verifier
	rt       *config.Resolved
	held     store.Fence
	timer    *time.Timer
	failures int // store failures in a row
}

// run makes the scheduled check that is due (on the timer's goroutine)
// and sets the timer for the next one, or ends the schedule.
func (s *checkSchedule) run() {
	rule := s.rt.Verify
	run, err := s.v.check(s.rt, s.held, store.Check{}, true, checkScheduled, nil)
	var wait time.Duration
	switch rec := run.rec; {
	case err != nil:
		// The store is unreachable: try again later, a few times.
		if s.failures++; s.failures > rule.Attempts {
			s.v.logger.Warn("verification schedule gave up: the record store keeps failing; the record stays held",
				zap.String("route", s.rt.Name), zap.String("record_id", s.held.ID()), zap.Error(err))
			s.v.use.Leave()
			return
		}
		wait = rule.Every
	case !s.held.Holds(rec),
		rec.NextCheck.IsZero() || rec.CheckCount >= int64(rule.Attempts):
		// Resolved, or gone, or its scheduled checks are done.
		s.v.use.Leave()
		return
	default:
		s.failures = 0
		next := rec.NextCheck
		if rec.CheckLeaseUntil.After(next) {
			next = rec.CheckLeaseUntil // another check is running
		}
		// At least a little while: this gateway's clock may run ahead of
		// the store's, which decides when a check is due.
		wait = max(time.Until(next), rule.Every/10, checkPoll)
	}
	s.timer.Reset(wait)
}
