package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/protocol/mcp"
)

// The adapter's side of routes with protocol: mcp (docs/mcp.md): which
// requests are guarded (toolCall, in ServeHTTP once the body is read),
// what passes on (passOn) and the refusal of an ambiguous body. The
// steps' side (the answer tapped, the replay, the JSON-RPC errors) is in
// guard/mcp.go.

// toolCall says whether the request to the MCP route rt, whose body is
// body, is guarded: a tool call of a listed tool, or a body refused as
// ambiguous; nil: anything else on the endpoint, which passes untouched.
func toolCall(rt *route, r *http.Request, body []byte) *guard.ToolCall {
	v, call := rt.ToolSet.Match(body)
	switch v {
	case mcp.Guard:
		return &guard.ToolCall{Call: call, SSE: mcp.AcceptsSSE(r.Header)}
	case mcp.Ambiguous:
		return &guard.ToolCall{Ambiguous: true}
	}
	return nil
}

// passOn sends a request to an MCP route that is not a guarded tool call
// on to the server untouched, with one exception: a notification that
// cancels a guarded call this handler is running for the same session
// is answered here (202) and not forwarded. The call goes on, and its
// answer is stored for the client's retry, as for a client that hung
// up (execute): forwarded, the cancel would only make the server drop
// the answer the retry needs, after the tool may have acted.
func (h *Handler) passOn(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body, raw []byte) error {
	if id, ok := mcp.Cancels(raw); ok && h.gate.Calls.Running(r.Header.Get(mcp.SessionHeader), id) {
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
	body.Forward(r)
	return next.ServeHTTP(w, r)
}

// ambiguousCall is the decision on a body refused as ambiguous.
func ambiguousCall(rt *route) *decision {
	return &decision{kind: decideProblem, would: metrics.WouldInvalid, outcome: guard.OutcomeInvalid, p: problem.AmbiguousCall.With(
		"members of this JSON-RPC request are named in another case than the protocol's, and a server matching names in any case would read another call of a guarded tool; nothing was forwarded", rt.Name)}
}
