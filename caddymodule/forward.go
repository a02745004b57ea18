package caddymodule

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// execute forwards a claimed request once and records what came back.
func (h *Handler) execute(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, key string, body *requestBody, c *store.Claim) error {
	// A client that hangs up must not cancel the call: it finishes, and
	// its result is stored for the client's retry.
	r = r.WithContext(context.WithoutCancel(r.Context()))
	prepareUpstream(r, g.rt, key, body)

	cw := newCapture(w, g.rt.MaxResponse)
	defer cw.release()

	renewing := h.renewWhileRunning(c)
	panicked, err := callNext(next, cw, r)
	renewing.stop()

	// The upstream's answer is all here (unless it was too large to hold
	// back): record it, then hand it to the client at whatever pace the
	// client reads. A duplicate meanwhile replays it. A response that
	// broke off reaches the client as it came, broken.
	h.settle(g, c, classify(g.rt, cw, err, panicked), cw)
	cw.deliver()
	if panicked != nil {
		// Out before the abort closes the connection, or the client
		// would see no answer at all (and its transport might resend).
		_ = cw.FlushError()
		panic(panicked)
	}
	return err
}

// prepareUpstream readies a claimed request for its one upstream call. r
// is the handler's own copy of the request: its header map is cloned
// before it is changed, so the request that Caddy's logs write (its error
// log, access logs) keeps the client's header names, which their filters
// name, and never shows the forwarded key under another name.
func prepareUpstream(r *http.Request, rt *route, key string, body *requestBody) {
	r.Header = r.Header.Clone()
	body.forward(r)
	if rt.ForwardKeyHeader != "" {
		// As the IETF Idempotency-Key draft requires of a client: a
		// Structured Field string. A valid key always has one.
		if sf, err := keying.FormatKeyHeader(key); err == nil {
			r.Header.Set(rt.ForwardKeyHeader, sf)
		}
	}
	hideReplayHints(r.Header)
}

// hideReplayHints keeps Go's http.Transport from resending the request on
// its own. The transport treats a request as replayable when its body is
// empty and it has an "Idempotency-Key" or "X-Idempotency-Key" header, and
// then silently sends it again when a reused connection breaks, after the
// upstream may already have acted. Header names are case-insensitive on
// the wire, so moving the values under lower-case map keys keeps them for
// the upstream and out of the transport's check.
func hideReplayHints(h http.Header) {
	for _, name := range [...]string{"Idempotency-Key", "X-Idempotency-Key"} {
		if v, ok := h[name]; ok {
			delete(h, name)
			h[lowerASCII(name)] = v
		}
	}
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// callNext runs the rest of the chain, catching a panic (reverse_proxy
// aborts a broken response with http.ErrAbortHandler) so the outcome can
// be recorded before it is re-raised.
func callNext(next caddyhttp.Handler, w http.ResponseWriter, r *http.Request) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, next.ServeHTTP(w, r)
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
	h.metrics.observeStore("renew", began, err)
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
