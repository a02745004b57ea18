package caddymodule

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/protocol/mcp"
	"github.com/idemgate/idemgate/store"
)

// execute forwards a client's claimed request once and records what
// came back (see forwardOnce).
func (h *Handler) execute(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body, c *store.Claim) error {
	// A client that hangs up must not cancel the call: it finishes, and
	// its result is stored for the client's retry.
	r = r.WithContext(context.WithoutCancel(r.Context()))
	if g.call != nil {
		defer h.calls.enter(g.call, r)()
	}
	_, panicked, err := h.forwardOnce(g, c, w, r, next, body)
	if panicked != nil {
		panic(panicked)
	}
	return err
}

// forwardOnce is the one execution of an operation, whoever started it
// (a client's request, an operator's re-drive): with the record claimed
// under c, it sends r once through next, renewing the claim's lease while
// the call runs, classifies what came back, records it under the claim,
// and then hands the answer to w. It returns what the outcome left on
// the record (see record), and the call's panic (re-raised by a client's
// execute once the answer is out) or error.
func (h *Handler) forwardOnce(g *guarded, c *store.Claim, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body) (result string, panicked any, err error) {
	body.ForUpstream(r, g.rt.ForwardKeyHeader, g.key)

	cw := exchange.NewCapture(w, g.rt.MaxResponse)
	defer cw.Release()
	var up http.ResponseWriter = cw
	var tap *mcp.Tap // a tool call's answer, tapped for its JSON-RPC response
	if g.call != nil {
		tap = tapCall(g, cw)
		up = tap
	}

	panicked, err = h.callUnderLease(c, next, up, r)

	// The upstream's answer is all here (unless it was too large to hold
	// back): record it, then hand it to the client at whatever pace the
	// client reads. A duplicate meanwhile replays it. A response that
	// broke off reaches the client as it came, broken.
	out, res := cw.Outcome(g.rt.answers, err, panicked)
	if tap != nil {
		out, res = toolOutcome(g.rt, tap, out, res)
	}
	result = h.record(g, c, out, res)
	cw.Deliver()
	if panicked != nil {
		// Out before the abort closes the connection, or the client
		// would see no answer at all (and its transport might resend).
		_ = cw.FlushError()
	}
	return result, panicked, err
}

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
