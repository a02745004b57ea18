package config

import (
	"strconv"
	"strings"
	"unicode"
)

// Protocol is a value of Route.Protocol: what the route's endpoint speaks.
type Protocol string

const (
	ProtocolHTTP Protocol = "http" // every matched request is guarded (default)
	// ProtocolMCP: an MCP server's Streamable HTTP endpoint. Only a
	// single JSON-RPC request tools/call of one of match.tools is
	// guarded; everything else on the endpoint passes through untouched
	// and is never stored. The gateway's answers are JSON-RPC errors.
	ProtocolMCP Protocol = "mcp"
)

// OnToolError is a value of Route.OnToolError: what an MCP tool result
// with isError: true means for its claim.
type OnToolError string

const (
	OnToolErrorStore   OnToolError = "store"   // the tool ran: its answer is stored and replayed (default)
	OnToolErrorRelease OnToolError = "release" // not done: the next retry runs the tool again
)

// mcpMethods are the methods an MCP route guards: a tool call is a POST.
var mcpMethods = []string{"POST"}

// methodsOf are the methods a route of protocol p guards by default.
func methodsOf(p Protocol) []string {
	if p == ProtocolMCP {
		return mcpMethods
	}
	return defaultMethods
}

// The JSON paths of a tool call's name and arguments in its request:
// the fingerprint of a call is these two, never the JSON-RPC id,
// jsonrpc, params._meta or a header.
const (
	mcpName      = "params.name"
	mcpArguments = "params.arguments"
)

// resolveProtocol fills in the protocol fields of res from rt. A route
// of protocol mcp has its fingerprint made of the call's tool name and
// canonical arguments (fingerprint.ignore names argument fields), never
// of the query string.
func resolveProtocol(res *Resolved, rt *Route) {
	if rt.Protocol != ProtocolMCP {
		return
	}
	res.Protocol = ProtocolMCP
	res.Tools = cloneOrNil(rt.Match.Tools)
	res.OnToolError = OnToolErrorStore
	if rt.OnToolError != "" {
		res.OnToolError = rt.OnToolError
	}
	res.Fingerprint.Body = []string{mcpArguments, mcpName}
	res.Fingerprint.Ignore = nil
	for _, p := range rt.Fingerprint.Ignore {
		res.Fingerprint.Ignore = append(res.Fingerprint.Ignore, mcpArguments+"."+p)
	}
	res.Fingerprint.IgnoreQuery = true
}

// mcpPaths checks that no two MCP routes match the same path: the first
// guards the endpoint, and passes every call of a tool it does not list
// on untouched, so a later one would never see its tools' calls.
func (c *errorList) mcpPaths(r *Rules) {
	first := map[string]int{}
	for i := range r.Routes {
		rt := &r.Routes[i]
		if rt.Protocol != ProtocolMCP || rt.Match.Path == "" {
			continue
		}
		p := strings.ToLower(rt.Match.Path)
		if j, dup := first[p]; dup {
			c.add("routes["+strconv.Itoa(i)+"].match.path", "%s is the MCP endpoint of routes[%d] (%s), which passes the calls of tools it does not list untouched: list these tools there, with a key template each (the first that resolves wins)", quote(rt.Match.Path), j, r.Routes[j].Name)
			continue
		}
		first[p] = i
	}
}

// maxToolName is the longest tool name a route may list.
const maxToolName = 128

// protocol checks route i's protocol and the fields that go with it.
func (c *errorList) protocol(i int, rt *Route, def *Policy) {
	f := "routes[" + strconv.Itoa(i) + "]."
	enum(c, f+"protocol", rt.Protocol, ProtocolHTTP, ProtocolMCP)
	if rt.Protocol != ProtocolMCP {
		if len(rt.Match.Tools) > 0 || c.isWritten(f+"match.tools") {
			c.add(f+"match.tools", "lists MCP tools, but the route is not protocol: mcp; set protocol: mcp, or leave match.tools out")
		}
		if rt.OnToolError != "" || c.isWritten(f+"on_tool_error") {
			c.add(f+"on_tool_error", "is for MCP tool results, but the route is not protocol: mcp")
		}
		return
	}
	if len(rt.Match.Tools) == 0 {
		c.add(f+"match.tools", "at least one tool is required with protocol: mcp, e.g. [create_deal]: only calls of the tools listed are guarded")
	}
	seen := map[string]int{}
	for j, name := range rt.Match.Tools {
		if k, dup := seen[name]; dup {
			c.add(at(f+"match.tools", j), "%s is already listed (match.tools[%d])", quote(name), k)
			continue
		}
		seen[name] = j
		if name == "" || len(name) > maxToolName || strings.TrimSpace(name) != name || strings.ContainsFunc(name, unicode.IsControl) {
			c.add(at(f+"match.tools", j), "%s is not a tool name (1 to %d characters, no control characters or surrounding spaces)", quote(name), maxToolName)
		}
	}
	for j, m := range rt.Match.Methods {
		if !strings.EqualFold(m, "POST") {
			c.add(at(f+"match.methods", j), "%s: an MCP endpoint takes tool calls by POST only (GET streams and DELETE pass through unguarded); leave match.methods out", quote(m))
		}
	}
	if len(rt.Fingerprint.Body) > 0 {
		c.add(f+"fingerprint.body", "the fingerprint of a tool call is its tool name and arguments; name argument fields that change between retries in fingerprint.ignore instead")
	}
	if rt.Fingerprint.Query != nil {
		c.add(f+"fingerprint.query", "the query string never counts in a tool call's fingerprint; leave fingerprint.query out")
	}
	if rt.Signature != nil {
		c.add(f+"signature", "an MCP endpoint is called by agents, not webhook senders; leave signature out")
	}
	switch {
	case rt.KeepRequest != nil && *rt.KeepRequest:
		c.add(f+"keep_request", "a tool call cannot be re-driven by an operator; leave keep_request out on a protocol: mcp route")
	case rt.KeepRequest == nil && def.KeepRequest != nil && *def.KeepRequest:
		c.add(f+"keep_request", "a tool call cannot be re-driven by an operator, and defaults.keep_request is true: set keep_request: false here")
	}
	enum(c, f+"on_tool_error", rt.OnToolError, OnToolErrorStore, OnToolErrorRelease)
}
