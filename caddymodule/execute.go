package caddymodule

import (
	"context"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// execute forwards a client's claimed request once and records what
// came back (see forwardOnce).
func (h *Handler) execute(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *requestBody, c *store.Claim) error {
	// A client that hangs up must not cancel the call: it finishes, and
	// its result is stored for the client's retry.
	r = r.WithContext(context.WithoutCancel(r.Context()))
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
func (h *Handler) forwardOnce(g *guarded, c *store.Claim, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *requestBody) (result string, panicked any, err error) {
	prepareUpstream(r, g.rt, g.key, body)

	cw := newCapture(w, g.rt.MaxResponse)
	defer cw.release()

	panicked, err = h.callUnderLease(c, next, cw, r)

	// The upstream's answer is all here (unless it was too large to hold
	// back): record it, then hand it to the client at whatever pace the
	// client reads. A duplicate meanwhile replays it. A response that
	// broke off reaches the client as it came, broken.
	out, res := cw.outcome(g.rt, err, panicked)
	result = h.record(g, c, out, res)
	cw.deliver()
	if panicked != nil {
		// Out before the abort closes the connection, or the client
		// would see no answer at all (and its transport might resend).
		_ = cw.FlushError()
	}
	return result, panicked, err
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
