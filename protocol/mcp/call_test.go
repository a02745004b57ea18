package mcp

import (
	"strings"
	"testing"
)

var tools = NewTools([]string{"create_deal", "send_invoice"})

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		want       Verdict
		id, tool   string
	}{
		{"a listed tool", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_deal","arguments":{"event_id":"e1"}}}`, Guard, "7", "create_deal"},
		{"a string id", `{"jsonrpc":"2.0","id":"a-\"1","method":"tools/call","params":{"name":"send_invoice"}}`, Guard, `"a-\"1"`, "send_invoice"},
		{"members in any order, white space", " {\n\"params\":{\"arguments\":{},\"name\":\"create_deal\"},\"method\":\"tools/call\",\"id\":1.5e3,\"jsonrpc\":\"2.0\"}\n", Guard, "1.5e3", "create_deal"},
		{"the last of a name given twice", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"other","name":"create_deal"}}`, Guard, "1", "create_deal"},
		{"the last of a name given twice, not a call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{"name":"create_deal"}}`, Pass, "", ""},
		{"another tool", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_deals"}}`, Pass, "", ""},
		{"a tool name in another case", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Create_Deal"}}`, Pass, "", ""},
		{"tools/list", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, Pass, "", ""},
		{"initialize", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`, Pass, "", ""},
		{"a notification", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"create_deal"}}`, Pass, "", ""},
		{"a null id", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"create_deal"}}`, Pass, "", ""},
		{"an object id", `{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{"name":"create_deal"}}`, Pass, "", ""},
		{"a response", `{"jsonrpc":"2.0","id":1,"result":{}}`, Pass, "", ""},
		{"a batch", `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_deal"}}]`, Pass, "", ""},
		{"JSON-RPC 1.0", `{"id":1,"method":"tools/call","params":{"name":"create_deal"}}`, Pass, "", ""},
		{"params not an object", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["create_deal"]}`, Pass, "", ""},
		{"a name not a string", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["create_deal"]}}`, Pass, "", ""},
		{"not JSON", `jsonrpc=2.0&method=tools/call`, Pass, "", ""},
		{"broken JSON", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_deal"}`, Pass, "", ""},
		{"empty", ``, Pass, "", ""},
		{"too deep", strings.Repeat("[", 200) + strings.Repeat("]", 200), Pass, "", ""},
		{"Method in another case", `{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call","params":{"name":"create_deal"}}`, Ambiguous, "", ""},
		{"Params in another case", `{"jsonrpc":"2.0","id":1,"method":"tools/call","PARAMS":{"name":"create_deal"}}`, Ambiguous, "", ""},
		{"Name in another case", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_deals","NAME":"create_deal"}}`, Ambiguous, "", ""},
		{"Arguments in another case", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_deal","arguments":{"a":1},"Arguments":{"a":2}}}`, Ambiguous, "", ""},
		{"another case that reads the same", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_deal","arguments":{},"_Meta":{}}}`, Guard, "1", "create_deal"},
		{"another case, no guarded call either way", `{"jsonrpc":"2.0","id":1,"Method":"tools/list"}`, Pass, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, call := tools.Match([]byte(tc.body))
			if got != tc.want || call.ID != tc.id || call.Tool != tc.tool {
				t.Fatalf("Match = %v %+v, want %v {ID:%s Tool:%s}", got, call, tc.want, tc.id, tc.tool)
			}
		})
	}
}

// The call's id and name are copies: the body's buffer goes back to its
// pool while the call is still used.
func TestMatchCopies(t *testing.T) {
	t.Parallel()
	body := []byte(`{"jsonrpc":"2.0","id":"abc","method":"tools/call","params":{"name":"create_deal"}}`)
	_, call := tools.Match(body)
	for i := range body {
		body[i] = 'x'
	}
	if call.ID != `"abc"` || call.Tool != "create_deal" {
		t.Fatalf("the call changed with its body: %+v", call)
	}
}
