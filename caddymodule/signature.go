package caddymodule

import (
	"net/http"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/problem"
)

// outcomeSignature: the route's signature check refused the request.
const outcomeSignature = "signature_invalid"

// verifySignature checks the request's signature on a route with
// `signature:` (rt.sig), before anything of the request is keyed or claimed: a
// delivery nobody signed cannot take a genuine event's id. It returns the
// scope the request's key is hashed with (the verified sender's on a
// route whose scope is its sender) and, for a request that fails, the
// decision that refuses it. The answer never says which part failed; the
// metric's reason does.
func (h *Handler) verifySignature(g *guarded, r *http.Request, body []byte) (scope [32]byte, refused *decision) {
	rt := g.rt
	sender, reason, ok := rt.sig.Verify(r.Header, body, time.Now())
	if !ok {
		h.metrics.SignatureFailures.WithLabelValues(rt.Name, string(reason)).Inc()
		g.note = "signature " + string(reason)
		p := problem.Signature.With("the request's signature could not be verified; nothing was claimed or forwarded", rt.Name)
		return scope, &decision{kind: decideProblem, would: metrics.WouldSignature, outcome: outcomeSignature, p: p}
	}
	if rt.ScopeSender {
		return keying.SenderScope(sender), nil
	}
	return keying.ScopeHash(rt.Scope, g.in), nil
}
