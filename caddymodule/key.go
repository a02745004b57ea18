package caddymodule

import (
	"errors"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// operation reads the request to route rt into its operation, once: the
// key and the template it came from, the fingerprint, the key id (and
// the payload id on a route with a same_payload_window), the check its
// claim keeps, and the request sealed for a re-drive. body is the body,
// read whole within max_body; call is the MCP tool call on a route with
// protocol: mcp. A request that cannot be guarded (an ambiguous tool
// call, a signature that fails, a key that is missing or malformed, a
// body the fingerprint cannot read) gets the decision that refuses or
// passes it, with the operation as far as it was read.
func (h *Handler) operation(rt *route, r *http.Request, next caddyhttp.Handler, target string, body []byte, call *guard.ToolCall) (*guard.Operation, *decision) {
	if call != nil && call.Ambiguous {
		return &guard.Operation{Route: rt, Call: call}, ambiguousCall(rt)
	}
	// The method as the route matched it: a retry sent as `post` is the
	// same request as POST (it is forwarded as sent).
	method := strings.ToUpper(r.Method)
	in := keying.NewInput(method, r.Header, r.URL.RawQuery, body)
	in.SetTarget(target)
	read := func(d decision) (*guard.Operation, *decision) {
		return &guard.Operation{Route: rt, Method: method, In: in, Call: call}, &d
	}
	var scope [32]byte
	if rt.Sig != nil {
		var refused *decision
		if scope, refused = h.verifySignature(rt, in, r, body); refused != nil {
			return read(*refused)
		}
	} else {
		scope = keying.ScopeHash(rt.Scope, in)
	}

	key, idx, err := keying.DeriveKey(rt.Key, in)
	switch {
	case errors.Is(err, keying.ErrInvalidKey):
		// A key header in two field lines, a list or a malformed
		// Structured Field string: never the first of several keys.
		return read(decision{kind: decideProblem, would: metrics.WouldInvalid, outcome: guard.OutcomeInvalid, p: problem.KeyInvalid.With(err.Error(), rt.Name)})
	case err != nil:
		return read(decision{kind: decideReject, would: metrics.WouldInvalid, err: err})
	case idx < 0 && rt.RequireKey:
		p := problem.KeyMissing.With("no key template could be resolved from the request; tried: "+rt.Templates, rt.Name)
		p.Tried = rt.TemplateList()
		return read(decision{kind: decideProblem, would: metrics.WouldMissingKey, outcome: guard.OutcomeMissingKey, p: p})
	case idx < 0:
		return read(decision{kind: decidePass})
	}
	if err := keying.ValidateKey(key); err != nil {
		return read(decision{kind: decideProblem, would: metrics.WouldInvalid, outcome: guard.OutcomeInvalid, p: problem.KeyInvalid.With(err.Error(), rt.Name)})
	}
	fp, err := keying.Fingerprint(method, rt.Operation, in, rt.Fingerprint)
	if err != nil {
		// The upstream gets the key (observe mode forwards the request).
		return &guard.Operation{Route: rt, Method: method, In: in, Key: key, KeyFrom: idx, Call: call},
			&decision{kind: decideReject, would: metrics.WouldInvalid, err: err}
	}
	id := h.ids.KeyID(rt.Operation, scope, key)
	var payload string
	if rt.SamePayloadWindow > 0 {
		payload = h.ids.PayloadID(rt.Operation, scope, fp)
	}
	var check store.Check
	if rt.Verify != nil {
		check = h.resolveCheck(rt, key, id, in)
	}
	var sealed []byte
	if rt.KeepRequest {
		sealed = h.keep(rt, id, r, key, body)
		h.remember(rt, next, r)
	}
	return &guard.Operation{
		Route: rt, Method: method, In: in, Key: key, KeyFrom: idx, Scope: scope,
		ID: id, FP: fp, Payload: payload, Check: check, Sealed: sealed, Call: call,
	}, nil
}
