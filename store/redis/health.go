package redis

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Availability reports a change of the store's reachability, as its
// claims see it: down at the first claim that fails to reach Redis, up
// again at the first call that succeeds (a claim, or the store's own
// probe, a PING every healthProbeEvery while it is down).
type Availability struct {
	// Up says that the store answers again; false: it stopped answering.
	Up bool
	// Err is the error of the claim that found it down (Up false).
	Err error
	// Down is how long it was down (Up true).
	Down time.Duration
	// Refused is how many claims failed while it was down (Up true): each
	// a request that was answered 503 (or forwarded unguarded on a
	// fail_open route).
	Refused int64
}

// healthProbeEvery spaces the probes of a store that is down.
const healthProbeEvery = 100 * time.Millisecond

// health tracks the store's availability for Options.OnAvailability.
type health struct {
	report func(Availability) // nil: not tracked

	mu      sync.Mutex
	down    bool
	since   time.Time // of the last change (down or up)
	refused int64
	probing bool
	closed  chan struct{}
}

// claimFailed says whether a claim error means Redis was not reached or
// not usable (as opposed to a refusal by design: a strict claim too few
// replicas acknowledged).
func claimFailed(err error) bool {
	return err != nil && !errors.Is(err, store.ErrReplicasShort)
}

// observe records the outcome of a claim sent at began (err nil: it
// reached Redis). Only a call sent after the last change may change the
// state again: a claim that was under way when Redis died and still
// reached it does not announce a recovery, nor does one that failed just
// before Redis came back announce a second outage.
func (s *Store) observe(began time.Time, err error) {
	h := &s.health
	if h.report == nil {
		return
	}
	if !claimFailed(err) {
		s.recovered(began)
		return
	}
	h.mu.Lock()
	if h.down {
		h.refused++
		h.mu.Unlock()
		return
	}
	if began.Before(h.since) {
		h.mu.Unlock()
		return
	}
	h.refused = 1
	h.down, h.since = true, time.Now()
	start := !h.probing
	h.probing = true
	h.mu.Unlock()
	h.report(Availability{Err: err})
	if start {
		go s.probe()
	}
}

// recovered reports the store up again if it was down when the
// successful call was sent.
func (s *Store) recovered(began time.Time) {
	h := &s.health
	h.mu.Lock()
	if !h.down || began.Before(h.since) {
		h.mu.Unlock()
		return
	}
	now := time.Now()
	a := Availability{Up: true, Down: now.Sub(h.since), Refused: h.refused}
	h.down, h.refused, h.since = false, 0, now
	h.mu.Unlock()
	h.report(a)
}

// probe pings Redis while the store is down, so its recovery is seen (and
// reported) also when no request comes.
func (s *Store) probe() {
	t := time.NewTicker(healthProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-s.health.closed:
			return
		case <-t.C:
		}
		s.health.mu.Lock()
		if !s.health.down {
			s.health.probing = false
			s.health.mu.Unlock()
			return
		}
		s.health.mu.Unlock()
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
		err := s.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.recovered(began)
		}
	}
}
