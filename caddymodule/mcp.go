package caddymodule

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tidwall/gjson"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/protocol/mcp"
	"github.com/idemgate/idemgate/store"
)

// The request path's hooks for routes with protocol: mcp (docs/mcp.md).
// Package mcp reads and writes the protocol; these put it in the steps:
// which requests are guarded (toolCall, in ServeHTTP once the body is
// read), the upstream's answer tapped and what it means (tapCall and
// toolOutcome, in forwardOnce), a replay with the retry's own JSON-RPC
// id (replayCall, in answer) and the gateway's own answers as JSON-RPC
// errors (toolError, in problem).

// toolCall is a guarded MCP tool call.
type toolCall struct {
	mcp.Call
	sse bool // the caller accepts an event stream
	// ambiguous: the body could be read as a guarded call by a server
	// that matches member names in any case; it is refused.
	ambiguous bool
	// kept is what the record keeps of the call (see keptCall).
	kept *store.ToolCall
}

// keptCall is what the record of the tool call g keeps for operators
// (its claim carries it): the tool's name and its arguments with the
// credential-like fields and the route's redact_fields redacted, cut
// past store.MaxToolArguments; nil on any other route. Redacted here,
// before the store sees it: nothing unredacted is ever stored.
func keptCall(g *guarded) *store.ToolCall {
	c := g.call
	if c == nil || c.ambiguous {
		return nil
	}
	if c.kept == nil {
		c.kept = operator.NewRedactor(g.rt.RedactFields).ToolCall(c.Tool, c.Arguments)
	}
	return c.kept
}

// toolCall says whether the request to g's MCP route, whose body is
// body, is guarded: a tool call of a listed tool (g.call), or a body
// refused as ambiguous. Anything else on the endpoint passes untouched.
func (h *Handler) toolCall(g *guarded, r *http.Request, body []byte) bool {
	v, call := g.rt.tools.Match(body)
	switch v {
	case mcp.Guard:
		g.call = &toolCall{Call: call, sse: mcp.AcceptsSSE(r.Header)}
	case mcp.Ambiguous:
		g.call = &toolCall{ambiguous: true}
	default:
		return false
	}
	return true
}

// passOn sends a request to an MCP route that is not a guarded tool call
// on to the server untouched, with one exception: a notification that
// cancels a guarded call this handler is running for the same session
// is answered here (202) and not forwarded. The call goes on, and its
// answer is stored for the client's retry, as for a client that hung
// up (execute): forwarded, the cancel would only make the server drop
// the answer the retry needs, after the tool may have acted.
func (h *Handler) passOn(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body, raw []byte) error {
	if id, ok := mcp.Cancels(raw); ok && h.calls.running(r.Header.Get(mcp.SessionHeader), id) {
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
	body.Forward(r)
	return next.ServeHTTP(w, r)
}

// runningCalls are the guarded tool calls a handler runs, by session and
// JSON-RPC id (mcp.IDKey): the calls a cancel notification may name.
// A nil *runningCalls runs none.
type runningCalls struct {
	mu    sync.Mutex
	calls map[string]int
}

// newRunningCalls is the running calls of a handler with routes; nil
// when none of them is an MCP route.
func newRunningCalls(routes []*route) *runningCalls {
	for _, rt := range routes {
		if rt.tools != nil {
			return &runningCalls{calls: map[string]int{}}
		}
	}
	return nil
}

// enter notes call, made on r's session, as running until the returned
// func is called. A call without a session (a stateless server) is not
// noted: its cancel cannot name it apart from other clients' calls.
func (rc *runningCalls) enter(call *toolCall, r *http.Request) (leave func()) {
	session := r.Header.Get(mcp.SessionHeader)
	if rc == nil || session == "" {
		return func() {}
	}
	k := session + "\x00" + mcp.IDKey(call.ID)
	rc.mu.Lock()
	rc.calls[k]++
	rc.mu.Unlock()
	return func() {
		rc.mu.Lock()
		if rc.calls[k]--; rc.calls[k] <= 0 {
			delete(rc.calls, k)
		}
		rc.mu.Unlock()
	}
}

// running reports whether the call id (JSON text) of session is running.
func (rc *runningCalls) running(session, id string) bool {
	if rc == nil || session == "" {
		return false
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.calls[session+"\x00"+mcp.IDKey(id)] > 0
}

// ambiguousCall is the decision on a body refused as ambiguous.
func ambiguousCall(rt *route) decision {
	return decision{kind: decideProblem, would: metrics.WouldInvalid, outcome: outcomeInvalid, p: problem.AmbiguousCall.With(
		"members of this JSON-RPC request are named in another case than the protocol's, and a server matching names in any case would read another call of a guarded tool; nothing was forwarded", rt.Name)}
}

// tapCall taps the upstream's answer to the tool call g, on its way to
// the capture cw, for the JSON-RPC response to the call.
func tapCall(g *guarded, cw *exchange.Capture) *mcp.Tap {
	return mcp.NewTap(cw, g.call.Call, g.rt.MaxResponse)
}

// toolOutcome is what the upstream's answer to a tool call means, and
// the result a completed call leaves: the JSON-RPC response to the call
// (from a JSON body, or from the event stream that streamed through),
// never the stream's other events. An answer that is not that response
// is an outcome unknown (a stream that ended before it, a body or event
// past max_response); an HTTP refusal (3xx, 4xx) is "not done": the
// server handled no message. A tool result with isError: true is a
// result, unless the route's on_tool_error is release. An event stream
// that broke after the response came whole is no outcome unknown: the
// call's answer is known, and stored.
func toolOutcome(rt *route, tap *mcp.Tap, out exchange.Result, res store.Result) (exchange.Result, store.Result) {
	a := tap.Answer(res.Body, res.BodyOmitted)
	switch {
	case out.Verdict != exchange.VerdictComplete && a.SSE && a.Message != nil && tap.Status() == http.StatusOK:
		out = exchange.Result{Verdict: exchange.VerdictComplete, Status: http.StatusOK}
	case out.Verdict != exchange.VerdictComplete:
		return out, res
	case out.Status >= 300:
		return exchange.Result{Verdict: exchange.VerdictRelease, Status: out.Status, Reason: "not_a_tool_answer"}, res
	}
	switch {
	case a.Message == nil:
		return exchange.Result{Verdict: exchange.VerdictUnknown, Status: out.Status, Reason: a.Missing, CutOff: true}, res
	case a.ToolError && rt.OnToolError == config.OnToolErrorRelease:
		return exchange.Result{Verdict: exchange.VerdictRelease, Status: out.Status, Reason: "tool_error"}, res
	}
	sum := sha256.Sum256(a.Message)
	res.Body, res.BodyOmitted, res.Digest, res.ExternalID = a.Message, false, hex.EncodeToString(sum[:]), ""
	if res.Header != nil {
		res.Header.Del("Mcp-Session-Id")
		res.Header.Del("Content-Length")
	}
	if rt.ExternalID != "" {
		if v := gjson.GetBytes(a.Message, rt.ExternalID); v.Exists() && store.ValidExternalID(v.String()) {
			res.ExternalID = v.String()
		}
	}
	return out, res
}

// replayCall answers a retried tool call from its completed record: the
// stored JSON-RPC response with the retry's id, as one SSE message event
// when the original came as an event stream and the retry accepts one,
// else as JSON. A stored result that is no JSON-RPC response (an error
// stored under on_unknown_outcome: store) is replayed as it was.
func replayCall(g *guarded, w http.ResponseWriter, rec *store.Record) error {
	msg, ok := mcp.Reply(rec.Body, g.call.ID)
	if !ok || rec.BodyOmitted || rec.Status != http.StatusOK {
		return replay(w, rec)
	}
	return mcp.WriteReplay(w, rec.Header, msg, mcp.IsSSE(rec.Header) && g.call.sse)
}

// toolError sends the gateway's own answer on an MCP route as a
// JSON-RPC error, HTTP 200, with the caller's id (null when none could
// be read): an MCP client never gets problem+json.
func toolError(g *guarded, w http.ResponseWriter, p problem.Problem) error {
	id := ""
	if g.call != nil {
		id = g.call.ID
	}
	g.status = http.StatusOK
	return mcp.WriteError(w, id, p)
}
