package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// mcpTool is an MCP server stand-in: a tool that answers isError, or 503
// when fail is set, and counts its executions and the other messages.
type mcpTool struct {
	calls, other atomic.Int64
	fail         atomic.Bool
}

func (m *mcpTool) next(w http.ResponseWriter, r *http.Request) error {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	_ = json.NewDecoder(r.Body).Decode(&msg)
	if msg.Method != "tools/call" {
		m.other.Add(1)
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
	n := m.calls.Add(1)
	if m.fail.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return nil
	}
	w.Header().Set("Content-Type", "application/json")
	_, err := fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"run %d"}],"isError":true}}`, msg.ID, n)
	return err
}

func toolCallBody(id, event string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"charge","arguments":{"event_id":%q}}}`, id, event)
}

// jsonRPCError reads a JSON-RPC error answer: its id and error.code.
func jsonRPCError(t *testing.T, code int, hdr http.Header, body string) (id string, errCode int) {
	t.Helper()
	var a struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if code != 200 || hdr.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &a) != nil || a.Error.Code == 0 {
		t.Fatalf("want a JSON-RPC error, got %d %v %s", code, hdr, body)
	}
	return string(a.ID), a.Error.Code
}

// The retry budget and the breaker answer a tool call as JSON-RPC
// errors with the caller's id; messages that are no guarded call never
// reach the store (no decision is logged for them).
func TestMCPBudgetAndBreaker(t *testing.T) {
	t.Parallel()
	h, logs := newHandler(t, `routes:
  - name: charge_tool
    protocol: mcp
    match: { path: /mcp, tools: [charge] }
    key: ["{body.params.arguments.event_id}"]
    on_tool_error: release
    retry: { max_executions: 2, breaker: { failures: 3, cool_down: 60s } }
`, testStores[0].cfg(t))
	tool := &mcpTool{}

	for i := 1; i <= 2; i++ {
		rec := serve(h, tool.next, "POST", "/mcp", toolCallBody(fmt.Sprint(i), "ev-1"), "Content-Type", "application/json")
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"isError":true`) {
			t.Fatalf("call %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := serve(h, tool.next, "POST", "/mcp", toolCallBody(`"third"`, "ev-1"), "Content-Type", "application/json")
	if id, code := jsonRPCError(t, rec.Code, rec.Header(), rec.Body.String()); id != `"third"` || code != -32011 {
		t.Fatalf("after the budget: id %s, code %d", id, code)
	}
	if n := tool.calls.Load(); n != 2 {
		t.Fatalf("the tool ran %d times within a budget of 2", n)
	}

	// Two "not done" answers and one more failure open the breaker (3).
	tool.fail.Store(true)
	serve(h, tool.next, "POST", "/mcp", toolCallBody("4", "ev-2"), "Content-Type", "application/json")
	rec = serve(h, tool.next, "POST", "/mcp", toolCallBody("5", "ev-3"), "Content-Type", "application/json")
	if id, code := jsonRPCError(t, rec.Code, rec.Header(), rec.Body.String()); id != "5" || code != -32010 {
		t.Fatalf("with the breaker open: id %s, code %d", id, code)
	}

	decisions := logs.FilterMessage("idempotency decision").Len()
	for _, body := range []string{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`} {
		if rec := serve(h, tool.next, "POST", "/mcp", body, "Content-Type", "application/json"); rec.Code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
		}
	}
	if got := logs.FilterMessage("idempotency decision").Len(); got != decisions || tool.other.Load() != 2 {
		t.Fatalf("messages that are no guarded call: %d decisions logged, %d reached the server", got-decisions, tool.other.Load())
	}
}
