package guard

import (
	"context"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/protocol/mcp"
	"github.com/idemgate/idemgate/store"
)

// Next is the rest of the handler chain the request goes through (in
// Caddy: reverse_proxy, and whatever the site puts before it).
type Next func(http.ResponseWriter, *http.Request) error

// Execute forwards a client's claimed request once and records what
// came back (see ForwardOnce). The call's panic is returned, for the
// adapter to re-raise once the outcome is set: the client has its
// answer by then.
func (g *Gate) Execute(op *Operation, adm *Admission, c *store.Claim, w http.ResponseWriter, r *http.Request, next Next, body *exchange.Body) (out Outcome, panicked any, err error) {
	// A client that hangs up must not cancel the call: it finishes, and
	// its result is stored for the client's retry.
	r = r.WithContext(context.WithoutCancel(r.Context()))
	if op.Call != nil {
		defer g.Calls.enter(op.Call, r)()
	}
	out, _, panicked, err = g.ForwardOnce(op, adm, c, w, r, next, body)
	return out, panicked, err
}

// ForwardOnce is the one execution of an operation, whoever started it
// (a client's request, an operator's re-drive): with the record claimed
// under c, it sends r once through next, renewing the claim's lease while
// the call runs, classifies what came back, records it under the claim,
// and then hands the answer to w. It returns the request's outcome, what
// the outcome left on the record (see record), and the call's panic
// (re-raised by a client's execute once the answer is out) or error.
func (g *Gate) ForwardOnce(op *Operation, adm *Admission, c *store.Claim, w http.ResponseWriter, r *http.Request, next Next, body *exchange.Body) (out Outcome, result string, panicked any, err error) {
	rt := op.Route
	body.ForUpstream(r, rt.ForwardKeyHeader, op.Key)

	cw := exchange.NewCapture(w, rt.MaxResponse)
	defer cw.Release()
	var up http.ResponseWriter = cw
	var tap *mcp.Tap // a tool call's answer, tapped for its JSON-RPC response
	if op.Call != nil {
		tap = tapCall(op, cw)
		up = tap
	}

	panicked, err = g.callUnderLease(c, next, up, r)

	// The upstream's answer is all here (unless it was too large to hold
	// back): record it, then hand it to the client at whatever pace the
	// client reads. A duplicate meanwhile replays it. A response that
	// broke off reaches the client as it came, broken.
	got, res := cw.Outcome(rt.Answers, err, panicked)
	if tap != nil {
		got, res = toolOutcome(rt, tap, got, res)
	}
	out, result = g.record(op, adm, c, got, res)
	cw.Deliver()
	if panicked != nil {
		// Out before the abort closes the connection, or the client
		// would see no answer at all (and its transport might resend).
		_ = cw.FlushError()
	}
	return out, result, panicked, err
}

// renewWhileRunning extends the claim's lease while the upstream call is
// alive, so a slow live call is never mistaken for a dead one. Calls that
// finish within a third of the lease cost no renewal: nothing runs before
// then but a timer (no goroutine per call). Its stop returns once no
// renewal is running and none will start.
func (g *Gate) renewWhileRunning(c *store.Claim) *renewal {
	rn := &renewal{g: g, claim: c}
	rn.mu.Lock() // renew reads rn.timer
	rn.timer = time.AfterFunc(c.Lease()/3, rn.renew)
	rn.mu.Unlock()
	return rn
}

// renewal is the lease renewal of one running call.
type renewal struct {
	g     *Gate
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
	g := rn.g
	ctx, cancel := context.WithTimeout(context.Background(), g.OpTimeout)
	began := time.Now()
	ok, err := rn.claim.Renew(ctx)
	cancel()
	g.Metrics.ObserveStore("renew", began, err)
	switch {
	case err != nil:
		g.Logger.Warn("renewing a claim failed", zap.String("record_id", rn.claim.ID()), zap.Error(err))
	case !ok:
		g.Logger.Warn("claim lost while the upstream call was running", zap.String("record_id", rn.claim.ID()))
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
func (g *Gate) callUnderLease(c *store.Claim, next Next, w http.ResponseWriter, r *http.Request) (panicked any, err error) {
	renewing := g.renewWhileRunning(c)
	defer renewing.stop()
	return callNext(next, w, r)
}

// callNext runs the rest of the chain, catching a panic (reverse_proxy
// aborts a broken response with http.ErrAbortHandler) so the outcome can
// be recorded before it is re-raised.
func callNext(next Next, w http.ResponseWriter, r *http.Request) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, next(w, r)
}
