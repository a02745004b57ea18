package store

import (
	"context"
	"errors"
	"sync"
	"time"
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
	since   time.Time
	refused int64
	probing bool
	closed  chan struct{}
}

// claimFailed says whether a claim error means Redis was not reached or
// not usable (as opposed to a refusal by design: a strict claim too few
// replicas acknowledged).
func claimFailed(err error) bool {
	return err != nil && !errors.Is(err, ErrReplicasShort)
}

// observe records the outcome of a claim (err nil: it reached Redis).
func (s *Store) observe(err error) {
	h := &s.health
	if h.report == nil {
		return
	}
	if !claimFailed(err) {
		s.recovered()
		return
	}
	h.mu.Lock()
	h.refused++
	if h.down {
		h.mu.Unlock()
		return
	}
	h.down, h.since = true, time.Now()
	start := !h.probing
	h.probing = true
	h.mu.Unlock()
	h.report(Availability{Err: err})
	if start {
		go s.probe()
	}
}

// recovered reports the store up again if it was down.
func (s *Store) recovered() {
	h := &s.health
	h.mu.Lock()
	if !h.down {
		h.mu.Unlock()
		return
	}
	a := Availability{Up: true, Down: time.Since(h.since), Refused: h.refused}
	h.down, h.refused = false, 0
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
		ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
		err := s.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.recovered()
		}
	}
}
