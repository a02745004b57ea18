// Package mcp is the Model Context Protocol on the gateway's request path:
// which requests to an MCP server's Streamable HTTP endpoint are guarded
// tool calls (Tools.Match), the JSON-RPC response to one found in an
// application/json or text/event-stream answer as it streams through
// (Tap), a stored response replayed with a retry's own JSON-RPC id
// (WriteReplay), and the gateway's own answers as JSON-RPC errors
// (WriteError). It knows nothing of Caddy or of the store: the handler
// hooks it into its steps.
package mcp

import (
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/idemgate/idemgate/keying"
)

// Method is the JSON-RPC method of a tool call.
const Method = "tools/call"

// Tools are the tool names a route guards.
type Tools map[string]bool

// NewTools returns the set of names.
func NewTools(names []string) Tools {
	t := make(Tools, len(names))
	for _, n := range names {
		t[n] = true
	}
	return t
}

// Call is one guarded tool call: a single JSON-RPC request with method
// tools/call whose params.name is listed.
type Call struct {
	// ID is the request's JSON-RPC id as its JSON text (a string with
	// its quotes, or a number), copied out of the body.
	ID string
	// Tool is params.name.
	Tool string
	// Arguments is params.arguments as its JSON text, copied out of the
	// body (nil when the call has none). It may hold credentials: it is
	// for the record's redacted summary (operator.Redactor.ToolCall), never to
	// be logged or shown as it is.
	Arguments []byte
}

// Verdict is what Match makes of a request body.
type Verdict int

const (
	// Pass: not a guarded call (not JSON, a batch, a notification, a
	// response, another method, another tool); it goes on untouched.
	Pass Verdict = iota
	// Guard: a tools/call of a listed tool.
	Guard
	// Ambiguous: a body whose members could be read as a guarded call
	// by a server that matches names without regard to case ("Method",
	// "PARAMS"): refused, so that no parser may run a listed tool
	// that the gateway let through unguarded.
	Ambiguous
)

// Match reads body as one JSON-RPC message and says whether it is a
// guarded call. Members are read as the server's JSON parser reads
// them: names exactly, and of a name given twice the last value (as
// encoding/json, JavaScript's JSON.parse and the MCP SDKs do). A body
// nesting deeper than keying.MaxDepth is not read (Pass): the key and
// the fingerprint refuse it if a route reads it.
func (t Tools) Match(body []byte) (Verdict, Call) {
	if keying.CheckDepth(body) != nil || !gjson.ValidBytes(body) {
		return Pass, Call{}
	}
	// The body outlives Match; what Match returns is copied out of it.
	doc := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	if !doc.IsObject() {
		return Pass, Call{} // a batch, or a lone value
	}
	exact, folded := read(doc, strings.EqualFold)
	v, c := t.verdict(exact)
	if !exact.same(folded) {
		// Names in another case: a server that matches them so might
		// read another message (or other arguments). Refused if either
		// reading is a guarded call.
		if fv, _ := t.verdict(folded); fv == Guard || v == Guard {
			return Ambiguous, Call{}
		}
	}
	return v, c
}

// message is the members of a JSON-RPC message that Match reads.
type message struct {
	version, method, id, name, args gjson.Result
}

// same reports whether m and o are the same members of one document.
func (m message) same(o message) bool {
	eq := func(a, b gjson.Result) bool { return a.Index == b.Index && a.Raw == b.Raw }
	return eq(m.version, o.version) && eq(m.method, o.method) && eq(m.id, o.id) && eq(m.name, o.name) && eq(m.args, o.args)
}

// read reads doc's members exactly, and as a parser that matches names
// in any case would (folded); of a name given twice, the last value.
func read(doc gjson.Result, fold func(a, b string) bool) (exact, folded message) {
	var params, foldedParams gjson.Result
	doc.ForEach(func(k, v gjson.Result) bool {
		set(k.Str, v, "jsonrpc", &exact.version, &folded.version, fold)
		set(k.Str, v, "method", &exact.method, &folded.method, fold)
		set(k.Str, v, "id", &exact.id, &folded.id, fold)
		set(k.Str, v, "params", &params, &foldedParams, fold)
		return true
	})
	if params.IsObject() {
		var fname, fargs *gjson.Result // the same object read both ways: once
		if foldedParams.Index == params.Index && foldedParams.Raw == params.Raw {
			fname, fargs = &folded.name, &folded.args
		}
		params.ForEach(func(k, v gjson.Result) bool {
			set(k.Str, v, "name", &exact.name, fname, fold)
			set(k.Str, v, "arguments", &exact.args, fargs, fold)
			return true
		})
		if fname != nil {
			return exact, folded
		}
	}
	if foldedParams.IsObject() {
		foldedParams.ForEach(func(k, v gjson.Result) bool {
			set(k.Str, v, "name", nil, &folded.name, fold)
			set(k.Str, v, "arguments", nil, &folded.args, fold)
			return true
		})
	}
	return exact, folded
}

// set sets the member v, named key, into exact when key is name, and
// into folded when fold finds them the same (either may be nil).
func set(key string, v gjson.Result, name string, exact, folded *gjson.Result, fold func(a, b string) bool) {
	if exact != nil && key == name {
		*exact = v
	}
	if folded != nil && fold(key, name) {
		*folded = v
	}
}

// verdict says whether m is a guarded call.
func (t Tools) verdict(m message) (Verdict, Call) {
	switch {
	case m.version.Type != gjson.String || m.version.Str != "2.0",
		m.method.Type != gjson.String || m.method.Str != Method,
		m.id.Type != gjson.String && m.id.Type != gjson.Number,
		m.name.Type != gjson.String || !t[m.name.Str]:
		return Pass, Call{}
	}
	c := Call{ID: strings.Clone(m.id.Raw), Tool: strings.Clone(m.name.Str)}
	if m.args.Raw != "" {
		c.Arguments = []byte(m.args.Raw)
	}
	return Guard, c
}

// SessionHeader is the header of an MCP session's id.
const SessionHeader = "Mcp-Session-Id"

// Cancels reads body as a notifications/cancelled and returns the id
// (JSON text) of the request it cancels.
func Cancels(body []byte) (requestID string, ok bool) {
	if keying.CheckDepth(body) != nil || !gjson.ValidBytes(body) {
		return "", false
	}
	doc := gjson.ParseBytes(body)
	if !doc.IsObject() || doc.Get("method").Str != "notifications/cancelled" || doc.Get("id").Exists() {
		return "", false
	}
	id := doc.Get("params.requestId")
	if id.Type != gjson.String && id.Type != gjson.Number {
		return "", false
	}
	return id.Raw, true
}

// IDKey is a JSON-RPC id (JSON text) as a map key: the same for ids that
// SameID finds the same.
func IDKey(id string) string {
	r := gjson.Parse(id)
	switch r.Type {
	case gjson.String:
		return "s" + r.Str
	case gjson.Number:
		if f, err := strconv.ParseFloat(r.Raw, 64); err == nil {
			return "n" + strconv.FormatFloat(f, 'g', -1, 64)
		}
		return "n" + r.Raw
	}
	return "?" + id
}
