package caddymodule

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

// renewWhileRunning extends the claim's lease while the upstream call is
// alive, so a slow live call is never mistaken for a dead one. Calls that
// finish within a third of the lease cost no renewal: nothing runs before
// then but a timer (no goroutine per call). Its stop returns once no
// renewal is running and none will start.
func (h *Handler) renewWhileRunning(c *store.Claim) *renewal {
	rn := &renewal{h: h, claim: c}
	rn.mu.Lock() // renew reads rn.timer
	rn.timer = time.AfterFunc(c.Lease()/3, rn.renew)
	rn.mu.Unlock()
	return rn
}

// renewal is the lease renewal of one running call.
type renewal struct {
	h     *Handler
	claim *store.Claim

	mu      sync.Mutex // held while a renewal runs
	timer   *time.Timer
	stopped bool
}

// renew runs on the timer's goroutine, a third of the lease after the call
// started or after the last renewal.
func (rn *renewal) renew() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.stopped {
		return
	}
	h := rn.h
	ctx, cancel := context.WithTimeout(context.Background(), h.opTimeout())
	began := time.Now()
	ok, err := rn.claim.Renew(ctx)
	cancel()
	h.metrics.ObserveStore("renew", began, err)
	switch {
	case err != nil:
		h.logger.Warn("renewing a claim failed", zap.String("record_id", rn.claim.ID()), zap.Error(err))
	case !ok:
		h.logger.Warn("claim lost while the upstream call was running", zap.String("record_id", rn.claim.ID()))
		return
	}
	rn.timer.Reset(rn.claim.Lease() / 3)
}

func (rn *renewal) stop() {
	rn.timer.Stop()
	rn.mu.Lock() // wait for a renewal under way
	rn.stopped = true
	rn.mu.Unlock()
}

// callUnderLease runs the rest of the chain once (callNext), renewing
// the claim's lease while the call runs.
func (h *Handler) callUnderLease(c *store.Claim, next caddyhttp.Handler, w http.ResponseWriter, r *http.Request) (panicked any, err error) {
	renewing := h.renewWhileRunning(c)
	defer renewing.stop()
	return callNext(next, w, r)
}

// callNext runs the rest of the chain, catching a panic (reverse_proxy
// aborts a broken response with http.ErrAbortHandler) so the outcome can
// be recorded before it is re-raised.
func callNext(next caddyhttp.Handler, w http.ResponseWriter, r *http.Request) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, next.ServeHTTP(w, r)
}
