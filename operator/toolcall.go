package operator

import "github.com/idemgate/idemgate/store"

// ToolCall is what a record keeps of a call of tool with arguments args
// (JSON), on a route guarding an MCP server: the values of the fields r
// hides (the built-in credential names and the route's redact_fields)
// replaced by Redacted at any depth, laid out on one line, cut past
// store.MaxToolArguments. Arguments that are not JSON are not kept. The
// request path makes it before the store sees the call: nothing
// unredacted is ever stored.
func (r Redactor) ToolCall(tool string, args []byte) *store.ToolCall {
	shown := r.Body(args, "application/json", "")
	if shown.Kind != BodyJSON {
		shown.Text = ""
	}
	return store.NewToolCall(tool, shown.Text)
}

// ToolArguments is c's arguments as operator views show them, laid out
// with indent per level ("": on one line): redacted again by r, so that
// a field the route's redact_fields named after the call was stored is
// hidden too; cut arguments (no longer JSON) as they were stored,
// redacted then.
func (r Redactor) ToolArguments(c *store.ToolCall, indent string) string {
	if shown := r.Body([]byte(c.Arguments), "application/json", indent); shown.Kind == BodyJSON {
		return shown.Text
	}
	return c.Arguments
}
