package store

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// MaxToolArguments bounds the arguments a record keeps of a tool call
// (ToolCall.Arguments), in bytes, before the cut marker.
const MaxToolArguments = 4096

// maxToolName bounds a kept tool name, in bytes.
const maxToolName = 256

// ToolCall is what a record keeps of the agent's tool call that claimed
// it, on a route guarding an MCP server (protocol: mcp), for operators:
// the tool's name and its arguments with the values of credential-like
// fields already redacted (see NewToolCall). Nothing unredacted is ever
// kept. A ToolCall is never changed once made: records share it.
type ToolCall struct {
	// Tool is the tool's name (params.name).
	Tool string
	// Arguments is params.arguments as JSON on one line, redacted (see
	// NewToolCall), at most MaxToolArguments bytes: longer ones are cut
	// and end with a marker saying how long they were, and are then no
	// longer JSON. "" when the call had none.
	Arguments string
}

// NewToolCall is what a record keeps of a call of tool whose arguments,
// as operators may see them, are args: JSON on one line with the values
// of credential-like fields already redacted ("" for none); the
// gateway's redaction (operator.Redactor.ToolCall) makes them. Both are
// cut past their bounds.
func NewToolCall(tool, args string) *ToolCall {
	return &ToolCall{Tool: cut(tool, maxToolName), Arguments: cut(args, MaxToolArguments)}
}

// cut is s with at most max bytes, cut at a character's start and
// marked so, when it is longer.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("… (cut: %d bytes in all)", len(s))
}

// maxToolCall bounds a ToolCall a claim may carry (its name and its
// arguments with their cut markers).
const maxToolCall = maxToolName + MaxToolArguments + 128

// validToolCall checks the tool call a claim carries (nil: none).
func validToolCall(c *ToolCall) error {
	if c != nil && (c.Tool == "" || len(c.Tool)+len(c.Arguments) > maxToolCall) {
		return fmt.Errorf("%w: a tool call without a name, or larger than %d bytes", ErrInvalidArgument, maxToolCall)
	}
	return nil
}

// toolCallJSON is the stored form of a ToolCall.
type toolCallJSON struct {
	Tool      string `json:"tool"`
	Arguments string `json:"arguments,omitempty"`
}

// EncodeToolCall is c in the form every engine stores (nil for nil).
func EncodeToolCall(c *ToolCall) []byte {
	if c == nil {
		return nil
	}
	b, _ := json.Marshal(toolCallJSON{c.Tool, c.Arguments}) // strings always encode
	return b
}

// DecodeToolCall is the inverse of EncodeToolCall: nil for an empty b
// (a record without one, or made before records kept them), and for
// one it cannot read, which a record's other fields outweigh.
func DecodeToolCall(b []byte) *ToolCall {
	var j toolCallJSON
	if len(b) == 0 || json.Unmarshal(b, &j) != nil || j.Tool == "" {
		return nil
	}
	return &ToolCall{Tool: j.Tool, Arguments: j.Arguments}
}
