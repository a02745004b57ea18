package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The edges of MCP routes, with a hand-written MCP server whose answers
// the test chooses: an event stream that ends before the response, a
// tool error under on_tool_error: release, a body past max_body, a
// duplicate of a call in flight, observe mode, the metrics by route.

const mcpEdgeRoutes = `routes:
  - name: edge_tool
    protocol: mcp
    match: { path: /mcp, tools: [create_deal, flaky_tool, cut_tool, held_tool, slow_tool, abrupt_tool] }
    key: ["{body.params.arguments.event_id}:{body.params.name}"]
    on_tool_error: release
    max_body: 2KiB
  - name: observed_tool
    protocol: mcp
    mode: observe
    match: { path: /mcp-observed, tools: [create_deal] }
    key: ["{body.params.arguments.event_id}:{body.params.name}"]
`

// rawMCP is an MCP server answering tools/call by tool: create_deal
// with JSON, flaky_tool with isError the first time, cut_tool with an
// event stream that ends after a progress notification, held_tool after
// the test opens its gate; other methods with an empty result.
type rawMCP struct {
	mu    sync.Mutex
	calls map[string]int // tool executions by tool and event id
	other int            // messages that were not tool calls
	gate  chan struct{}  // held_tool goes on when closed
	slow  chan struct{}  // slow_tool goes on when closed
	last  string         // the last message that was not a tool call
}

func (s *rawMCP) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string `json:"name"`
			Arguments struct {
				EventID string `json:"event_id"`
			} `json:"arguments"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &m)
	if m.Method != "tools/call" {
		s.mu.Lock()
		s.other++
		s.last = string(body)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, orNull(m.ID))
		return
	}
	s.mu.Lock()
	s.calls[m.Params.Name+"/"+m.Params.Arguments.EventID]++
	n := s.calls[m.Params.Name+"/"+m.Params.Arguments.EventID]
	s.mu.Unlock()
	switch m.Params.Name {
	case "abrupt_tool":
		// The response event, then the connection broken mid-stream.
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"run %d\"}]}}\n\n", m.ID, n)
		_ = http.NewResponseController(w).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	case "cut_tool":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1}}\n\n")
		return // the stream ends: no response
	case "held_tool", "slow_tool":
		gate := s.gate
		if m.Params.Name == "slow_tool" {
			gate = s.slow
		}
		select {
		case <-gate:
		case <-time.After(10 * time.Second):
		}
	}
	isError := m.Params.Name == "flaky_tool" && n == 1
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Mcp-Session-Id", "session-of-the-first-call")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"run %d"}],"isError":%v}}`, m.ID, n, isError)
}

func orNull(id json.RawMessage) string {
	if len(id) == 0 {
		return "null"
	}
	return string(id)
}

func (s *rawMCP) count(tool, event string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[tool+"/"+event]
}

// rpcCall is the body of a tools/call with JSON-RPC id id.
func rpcCall(id, tool, event string) []byte {
	return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q,"arguments":{"event_id":%q},"_meta":{"progressToken":%s}}}`, id, tool, event, id))
}

// rpcAnswer is a JSON-RPC response or error as a test reads it.
type rpcAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	} `json:"result"`
	Error *struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	} `json:"error"`
}

func readRPC(t *testing.T, r response) rpcAnswer {
	t.Helper()
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("answer %d %q: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	var a rpcAnswer
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatalf("%s: %v", r.body, err)
	}
	return a
}

func TestMCPEdges(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		srv := &rawMCP{calls: map[string]int{}, gate: make(chan struct{}), slow: make(chan struct{})}
		up := startFake(t, srv.serve)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: mcpEdgeRoutes})
		post := func(path string, body []byte) response {
			return send(t, "POST", gw.url+path, body, "Content-Type", "application/json",
				"Accept", "application/json, text/event-stream", "Authorization", "Bearer agent-7")
		}

		t.Run("a stream that ends before the response is an outcome unknown", func(t *testing.T) {
			r := post("/mcp", rpcCall("1", "cut_tool", "e-cut"))
			if !strings.Contains(string(r.body), "notifications/progress") {
				t.Fatalf("the stream did not come through: %s", r.body)
			}
			a := readRPC(t, post("/mcp", rpcCall(`"retry-2"`, "cut_tool", "e-cut")))
			if string(a.ID) != `"retry-2"` || a.Error == nil || a.Error.Code != -32009 || a.Error.Data["status"] != float64(409) {
				t.Fatalf("the retry: %+v", a)
			}
			if n := srv.count("cut_tool", "e-cut"); n != 1 {
				t.Fatalf("cut_tool ran %d times", n)
			}
		})

		t.Run("a stream that breaks after the response is a result", func(t *testing.T) {
			if _, err := do(client, "POST", gw.url+"/mcp", rpcCall("1", "abrupt_tool", "e-abrupt"), "Content-Type", "application/json",
				"Accept", "application/json, text/event-stream", "Authorization", "Bearer agent-7"); err == nil {
				t.Log("the broken stream read without an error")
			}
			r := post("/mcp", rpcCall("2", "abrupt_tool", "e-abrupt"))
			if r.header.Get("Idempotent-Replayed") != "true" || !strings.HasPrefix(string(r.body), "event: message\ndata: ") || !strings.Contains(string(r.body), `"id":2,`) || !strings.Contains(string(r.body), "run 1") {
				t.Fatalf("the retry: %d %v %q", r.status, r.header, r.body)
			}
			if n := srv.count("abrupt_tool", "e-abrupt"); n != 1 {
				t.Fatalf("abrupt_tool ran %d times", n)
			}
		})

		t.Run("on_tool_error: release runs the tool again after isError", func(t *testing.T) {
			a := readRPC(t, post("/mcp", rpcCall("1", "flaky_tool", "e-flaky")))
			if !a.Result.IsError {
				t.Fatalf("the first answer: %+v", a)
			}
			a = readRPC(t, post("/mcp", rpcCall("2", "flaky_tool", "e-flaky")))
			if a.Result.IsError || a.Result.Content[0].Text != "run 2" {
				t.Fatalf("the retry: %+v", a)
			}
			r := post("/mcp", rpcCall("3", "flaky_tool", "e-flaky"))
			a = readRPC(t, r)
			if r.header.Get("Idempotent-Replayed") != "true" || string(a.ID) != "3" || a.Result.Content[0].Text != "run 2" || r.header.Get("Mcp-Session-Id") != "" {
				t.Fatalf("the third: %v %+v", r.header, a)
			}
			if n := srv.count("flaky_tool", "e-flaky"); n != 2 {
				t.Fatalf("flaky_tool ran %d times", n)
			}
		})

		t.Run("other arguments under the same key are refused", func(t *testing.T) {
			readRPC(t, post("/mcp", rpcCall("1", "create_deal", "e-reuse")))
			body := []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_deal","arguments":{"event_id":"e-reuse","amount":5}}}`)
			a := readRPC(t, post("/mcp", body))
			if a.Error == nil || a.Error.Code != -32007 || string(a.ID) != "2" {
				t.Fatalf("the call with other arguments: %+v", a)
			}
			// The same arguments in another order, another id, another _meta: the same call.
			body = []byte(`{"params":{"_meta":{"progressToken":"x"},"arguments":{"event_id":"e-reuse"},"name":"create_deal"},"method":"tools/call","id":"z","jsonrpc":"2.0"}`)
			if r := post("/mcp", body); r.header.Get("Idempotent-Replayed") != "true" || string(readRPC(t, r).ID) != `"z"` {
				t.Fatalf("the same call reworded: %v %s", r.header, r.body)
			}
		})

		t.Run("a body past max_body is refused as a JSON-RPC error", func(t *testing.T) {
			body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_deal","arguments":{"event_id":"e-big","pad":"` + strings.Repeat("x", 3000) + `"}}}`)
			a := readRPC(t, post("/mcp", body))
			if string(a.ID) != "null" || a.Error == nil || a.Error.Code != -32006 || a.Error.Data["status"] != float64(413) {
				t.Fatalf("the large call: %+v", a)
			}
		})

		t.Run("a key missing from the arguments is a JSON-RPC error", func(t *testing.T) {
			a := readRPC(t, post("/mcp", []byte(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"create_deal","arguments":{}}}`)))
			if string(a.ID) != "8" || a.Error == nil || a.Error.Code != -32001 {
				t.Fatalf("the call without event_id: %+v", a)
			}
		})

		t.Run("a duplicate of a call in flight gets -32008", func(t *testing.T) {
			done := make(chan response, 1)
			go func() {
				r, _ := do(client, "POST", gw.url+"/mcp", rpcCall("1", "held_tool", "e-held"), "Content-Type", "application/json", "Authorization", "Bearer agent-7")
				done <- r
			}()
			waitFor(t, func() bool { return srv.count("held_tool", "e-held") == 1 })
			a := readRPC(t, post("/mcp", rpcCall("2", "held_tool", "e-held")))
			close(srv.gate)
			if string(a.ID) != "2" || a.Error == nil || a.Error.Code != -32008 || a.Error.Data["retry_after"] == nil {
				t.Fatalf("the duplicate: %+v", a)
			}
			if r := <-done; r.status != 200 {
				t.Fatalf("the first: %d %s", r.status, r.body)
			}
		})

		t.Run("a cancel of a guarded call in flight is answered, not forwarded", func(t *testing.T) {
			done := make(chan response, 1)
			go func() {
				r, _ := do(client, "POST", gw.url+"/mcp", rpcCall("41", "slow_tool", "e-cancel"), "Content-Type", "application/json",
					"Authorization", "Bearer agent-7", "Mcp-Session-Id", "session-a")
				done <- r
			}()
			waitFor(t, func() bool { return srv.count("slow_tool", "e-cancel") == 1 })
			srv.mu.Lock()
			before := srv.other
			srv.mu.Unlock()
			cancel := func(session, id string) response {
				return send(t, "POST", gw.url+"/mcp", []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`,"reason":"timeout"}}`),
					"Content-Type", "application/json", "Mcp-Session-Id", session)
			}
			if r := cancel("session-a", "41.0"); r.status != http.StatusAccepted {
				t.Fatalf("the cancel of the running call: %d %s", r.status, r.body)
			}
			srv.mu.Lock()
			swallowed := srv.other == before
			srv.mu.Unlock()
			cancel("session-b", "41") // another session's request 41: not this call
			cancel("session-a", "42") // another request of this session
			close(srv.slow)
			first := <-done
			srv.mu.Lock()
			passed, last := srv.other-before, srv.last
			srv.mu.Unlock()
			if !swallowed || passed != 2 || !strings.Contains(last, `"requestId":42`) {
				t.Fatalf("the server got %d cancels (swallowed the first: %v), the last %s", passed, swallowed, last)
			}
			if a := readRPC(t, first); a.Result.Content[0].Text != "run 1" {
				t.Fatalf("the cancelled call's answer: %+v", a)
			}
			r := post("/mcp", rpcCall("43", "slow_tool", "e-cancel"))
			if r.header.Get("Idempotent-Replayed") != "true" || string(readRPC(t, r).ID) != "43" {
				t.Fatalf("the retry of the cancelled call: %v %s", r.header, r.body)
			}
		})

		t.Run("everything else passes, never counted", func(t *testing.T) {
			decisions := func() (n float64) {
				for _, line := range strings.Split(metricsText(t, gw), "\n") {
					if strings.HasPrefix(line, "idemgate_requests_total{") && strings.Contains(line, `route="edge_tool"`) {
						var v float64
						_, _ = fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
						n += v
					}
				}
				return n
			}
			before := decisions()
			for _, body := range []string{
				`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
				`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_deals","arguments":{}}}`,
				`[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_deal","arguments":{"event_id":"e-batch"}}}]`,
				`not json`,
			} {
				post("/mcp", []byte(body))
			}
			srv.mu.Lock()
			other := srv.other
			srv.mu.Unlock()
			if other < 4 {
				t.Fatalf("the server got %d of the messages", other)
			}
			if after := decisions(); after != before || before == 0 {
				t.Fatalf("the route's decisions went from %v to %v for messages that are no guarded call", before, after)
			}
			if got := metric(t, gw, "idemgate_requests_total", `route="edge_tool"`, `outcome="replayed"`); got < 2 {
				t.Fatalf("replays counted for the route: %v", got)
			}
		})

		t.Run("observe mode forwards the duplicate and counts what enforce would do", func(t *testing.T) {
			readRPC(t, post("/mcp-observed", rpcCall("1", "create_deal", "e-obs")))
			r := post("/mcp-observed", rpcCall("2", "create_deal", "e-obs"))
			if r.header.Get("Idempotent-Replayed") != "" || srv.count("create_deal", "e-obs") != 2 {
				t.Fatalf("observe mode: %v, %d executions", r.header, srv.count("create_deal", "e-obs"))
			}
			if got := metric(t, gw, "idemgate_observed_total", `route="observed_tool"`, `would="replay"`); got != 1 {
				t.Fatalf("idemgate_observed_total would replay: %v", got)
			}
		})
	})
}
