package config

import (
	"reflect"
	"testing"

	"github.com/idemgate/idemgate/keying"
)

func TestProtocolMCP(t *testing.T) {
	t.Parallel()
	r, err := Parse("r.yaml", []byte(`routes:
  - name: deals_tool
    protocol: mcp
    match: { path: /mcp, tools: [create_deal, send_invoice] }
    key: ["{body.params.arguments.event_id}:{body.params.name}"]
    fingerprint: { ignore: [request_time] }
    on_tool_error: release
  - name: plain
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	mcp := res[0]
	want := keying.FingerprintRule{Body: []string{"params.arguments", "params.name"}, Ignore: []string{"params.arguments.request_time"}, IgnoreQuery: true}
	if mcp.Protocol != ProtocolMCP || !reflect.DeepEqual(mcp.Tools, []string{"create_deal", "send_invoice"}) ||
		mcp.OnToolError != OnToolErrorRelease || !reflect.DeepEqual(mcp.Methods, []string{"POST"}) || !reflect.DeepEqual(mcp.Fingerprint, want) {
		t.Fatalf("resolved: %+v", mcp)
	}
	if plain := res[1]; plain.Protocol != "" || plain.Tools != nil || plain.OnToolError != "" || len(plain.Methods) != 4 {
		t.Fatalf("a plain route: %+v", plain)
	}
	again, _ := jsonRoundTrip(t, r)
	if !equalResolved(res, again) {
		t.Fatalf("JSON round trip:\n%+v\n%+v", res, again)
	}
}

func TestProtocolErrors(t *testing.T) {
	t.Parallel()
	wantParseErrors(t, `routes:
  - name: a
    protocol: mpc
    match: { path: /mcp, tools: [create_deal] }
    key: ["{body.params.arguments.event_id}"]
    on_tool_error: store
  - name: b
    protocol: mcp
    match: { path: /mcp }
    key: ["{body.params.arguments.event_id}"]
  - name: c
    protocol: mcp
    match:
      path: /mcp2
      methods: [POST, DELETE]
      tools: [create_deal, "", create_deal, " x"]
    key: ["{body.params.arguments.event_id}"]
    fingerprint: { body: [params], query: false }
    keep_request: true
    on_tool_error: retry
`, []string{
		`r.yaml:3: routes[0].protocol: "mpc" is not one of http, mcp`,
		`r.yaml:4: routes[0].match.tools: lists MCP tools, but the route is not protocol: mcp; set protocol: mcp, or leave match.tools out`,
		`r.yaml:6: routes[0].on_tool_error: is for MCP tool results, but the route is not protocol: mcp`,
		`r.yaml:9: routes[1].match.tools: at least one tool is required with protocol: mcp, e.g. [create_deal]: only calls of the tools listed are guarded`,
		`r.yaml:15: routes[2].match.methods[1]: "DELETE": an MCP endpoint takes tool calls by POST only (GET streams and DELETE pass through unguarded); leave match.methods out`,
		`r.yaml:16: routes[2].match.tools[1]: "" is not a tool name (1 to 128 characters, no control characters or surrounding spaces)`,
		`r.yaml:16: routes[2].match.tools[2]: "create_deal" is already listed (match.tools[0])`,
		`r.yaml:16: routes[2].match.tools[3]: " x" is not a tool name (1 to 128 characters, no control characters or surrounding spaces)`,
		`r.yaml:18: routes[2].fingerprint.body: the fingerprint of a tool call is its tool name and arguments; name argument fields that change between retries in fingerprint.ignore instead`,
		`r.yaml:18: routes[2].fingerprint.query: the query string never counts in a tool call's fingerprint; leave fingerprint.query out`,
		`r.yaml:19: routes[2].keep_request: a tool call cannot be re-driven by an operator; leave keep_request out on a protocol: mcp route`,
		`r.yaml:20: routes[2].on_tool_error: "retry" is not one of store, release`,
	})
}

func TestProtocolOneRoutePerEndpoint(t *testing.T) {
	t.Parallel()
	wantParseErrors(t, `routes:
  - name: deals
    protocol: mcp
    match: { path: /mcp, tools: [create_deal] }
    key: ["{body.params.arguments.event_id}"]
  - name: invoices
    protocol: mcp
    match: { path: /MCP, tools: [send_invoice] }
    key: ["{body.params.arguments.invoice_id}"]
`, []string{
		`r.yaml:8: routes[1].match.path: "/MCP" is the MCP endpoint of routes[0] (deals), which passes the calls of tools it does not list untouched: list these tools there, with a key template each (the first that resolves wins)`,
	})
}
