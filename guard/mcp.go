package guard

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sync"

	"github.com/tidwall/gjson"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/protocol/mcp"
	"github.com/idemgate/idemgate/store"
)

// The steps' hooks for routes with protocol: mcp (docs/mcp.md). Package
// mcp reads and writes the protocol; these put it in the steps: the
// upstream's answer tapped and what it means (tapCall and toolOutcome,
// in ForwardOnce), a replay with the retry's own JSON-RPC id (replayCall,
// in Answer) and the gateway's own answers as JSON-RPC errors
// (toolError, in Refuse). Which requests are guarded is the adapter's
// to say, once the body is read.

// ToolCall is a guarded MCP tool call.
type ToolCall struct {
	mcp.Call
	SSE bool // the caller accepts an event stream
	// Ambiguous: the body could be read as a guarded call by a server
	// that matches member names in any case; it is refused.
	Ambiguous bool
	// kept is what the record keeps of the call (see keptCall).
	kept *store.ToolCall
}

// keptCall is what the record of the tool call op keeps for operators
// (its claim carries it): the tool's name and its arguments with the
// credential-like fields and the route's redact_fields redacted, cut
// past store.MaxToolArguments; nil on any other route. Redacted here,
// before the store sees it: nothing unredacted is ever stored.
func keptCall(op *Operation) *store.ToolCall {
	c := op.Call
	if c == nil || c.Ambiguous {
		return nil
	}
	if c.kept == nil {
		c.kept = operator.NewRedactor(op.Route.RedactFields).ToolCall(c.Tool, c.Arguments)
	}
	return c.kept
}

// RunningCalls are the guarded tool calls a handler runs, by session and
// JSON-RPC id (mcp.IDKey): the calls a cancel notification may name.
// A nil *RunningCalls runs none.
type RunningCalls struct {
	mu    sync.Mutex
	calls map[string]int
}

// NewRunningCalls is the running calls of a handler with routes; nil
// when none of them is an MCP route.
func NewRunningCalls(routes []*Route) *RunningCalls {
	for _, rt := range routes {
		if rt.ToolSet != nil {
			return &RunningCalls{calls: map[string]int{}}
		}
	}
	return nil
}

// enter notes call, made on r's session, as running until the returned
// func is called. A call without a session (a stateless server) is not
// noted: its cancel cannot name it apart from other clients' calls.
func (rc *RunningCalls) enter(call *ToolCall, r *http.Request) (leave func()) {
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

// Running reports whether the call id (JSON text) of session is running.
func (rc *RunningCalls) Running(session, id string) bool {
	if rc == nil || session == "" {
		return false
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.calls[session+"\x00"+mcp.IDKey(id)] > 0
}

// tapCall taps the upstream's answer to the tool call op, on its way to
// the capture cw, for the JSON-RPC response to the call.
func tapCall(op *Operation, cw *exchange.Capture) *mcp.Tap {
	return mcp.NewTap(cw, op.Call.Call, op.Route.MaxResponse)
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
func toolOutcome(rt *Route, tap *mcp.Tap, out exchange.Result, res store.Result) (exchange.Result, store.Result) {
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
func replayCall(op *Operation, w http.ResponseWriter, rec *store.Record) error {
	msg, ok := mcp.Reply(rec.Body, op.Call.ID)
	if !ok || rec.BodyOmitted || rec.Status != http.StatusOK {
		return replay(w, rec)
	}
	return mcp.WriteReplay(w, rec.Header, msg, mcp.IsSSE(rec.Header) && op.Call.SSE)
}

// toolError sends the gateway's own answer on an MCP route as a
// JSON-RPC error, HTTP 200, with the caller's id (null when none could
// be read): an MCP client never gets problem+json.
func toolError(op *Operation, w http.ResponseWriter, p problem.Problem) error {
	id := ""
	if op.Call != nil {
		id = op.Call.ID
	}
	return mcp.WriteError(w, id, p)
}
