package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP tests run the official Go SDK as both the MCP server behind the
// gateway and the agent's client in front of it, through the real
// binary, on every store.

// mcpRoutes guard create_deal and slow_deal on /mcp (JSON answers; a
// duplicate waits for the first call), progress_deal on /mcp-sse (event
// streams with progress), and create_deal on /mcp-verified, whose
// outcome unknown is looked up in the server's CRM. list_deals is
// never guarded.
const mcpRoutes = `routes:
  - name: deals_tool
    protocol: mcp
    match: { path: /mcp, tools: [create_deal, slow_deal] }
    key: ["{body.params.arguments.event_id}:{body.params.name}"]
    on_in_flight: wait
    in_flight_wait: 15s
  - name: progress_tool
    protocol: mcp
    match: { path: /mcp-sse, tools: [progress_deal] }
    key: ["{body.params.arguments.event_id}:{body.params.name}"]
  - name: verified_tool
    protocol: mcp
    match: { path: /mcp-verified, tools: [create_deal] }
    key: ["{body.params.arguments.event_id}:{body.params.name}"]
    verify:
      url: "{env.MCP_CRM_URL}/deals?event_id={body.params.arguments.event_id}"
      timeout: 2s
      found: { status: [200], id: "0.deal_id", object: "0" }
      attempts: 0
`

// dealIn and dealOut are the deal tools' arguments and result.
type dealIn struct {
	EventID string `json:"event_id"`
	Name    string `json:"name"`
	Amount  int    `json:"amount"`
	// APIKey is a credential the agent passes along: operators never
	// see it.
	APIKey string `json:"api_key,omitempty"`
}

type dealOut struct {
	DealID  string `json:"deal_id"`
	EventID string `json:"event_id"`
}

// mcpServer is an MCP server made with the Go SDK, in front of a CRM of
// its own: each execution of a deal tool creates a deal.
type mcpServer struct {
	srv *httptest.Server

	mu         sync.Mutex
	executions map[string]int     // deal tool executions, by event id
	deals      map[string]dealOut // the CRM's deals, by event id
	methods    map[string]int     // JSON-RPC methods the server received
	listCalls  atomic.Int64       // list_deals executions
	dropped    map[string]bool    // event ids whose first answer was dropped
	progressed chan struct{}      // closed by the test: progress_deal may finish
}

func startMCPServer(t *testing.T) *mcpServer {
	t.Helper()
	s := &mcpServer{executions: map[string]int{}, deals: map[string]dealOut{}, methods: map[string]int{},
		dropped: map[string]bool{}, progressed: make(chan struct{})}
	server := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "crm-tools", Version: "1.0.0"}, nil)
	mcpsdk.AddTool(server, &mcpsdk.Tool{Name: "create_deal", Description: "Create a CRM deal"},
		func(ctx context.Context, req *mcpsdk.CallToolRequest, in dealIn) (*mcpsdk.CallToolResult, dealOut, error) {
			return nil, s.create(in), nil
		})
	mcpsdk.AddTool(server, &mcpsdk.Tool{Name: "slow_deal", Description: "Create a CRM deal, slowly"},
		func(ctx context.Context, req *mcpsdk.CallToolRequest, in dealIn) (*mcpsdk.CallToolResult, dealOut, error) {
			time.Sleep(700 * time.Millisecond)
			return nil, s.create(in), nil
		})
	mcpsdk.AddTool(server, &mcpsdk.Tool{Name: "progress_deal", Description: "Create a CRM deal, telling its progress"},
		func(ctx context.Context, req *mcpsdk.CallToolRequest, in dealIn) (*mcpsdk.CallToolResult, dealOut, error) {
			tok := req.Params.GetProgressToken()
			for i := 1; i <= 3; i++ {
				if tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcpsdk.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3, Message: "step"})
				}
				if i == 1 {
					// The deal waits until the client has seen the first
					// progress: a gateway that held the stream back
					// would never let it go on.
					select {
					case <-s.progressed:
					case <-time.After(10 * time.Second):
						return nil, dealOut{}, errors.New("the first progress notification never reached the client")
					}
				}
			}
			return nil, s.create(in), nil
		})
	mcpsdk.AddTool(server, &mcpsdk.Tool{Name: "list_deals", Description: "List deals"},
		func(ctx context.Context, req *mcpsdk.CallToolRequest, in struct{}) (*mcpsdk.CallToolResult, struct {
			N int `json:"n"`
		}, error) {
			s.listCalls.Add(1)
			s.mu.Lock()
			defer s.mu.Unlock()
			return nil, struct {
				N int `json:"n"`
			}{len(s.deals)}, nil
		})
	get := func(*http.Request) *mcpsdk.Server { return server }
	jsonHandler := mcpsdk.NewStreamableHTTPHandler(get, &mcpsdk.StreamableHTTPOptions{JSONResponse: true})
	sseHandler := mcpsdk.NewStreamableHTTPHandler(get, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.counting(jsonHandler))
	mux.Handle("/mcp-verified", s.counting(jsonHandler))
	mux.Handle("/mcp-sse", s.counting(sseHandler))
	mux.HandleFunc("GET /deals", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		d, ok := s.deals[r.URL.Query().Get("event_id")]
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			_, _ = io.WriteString(w, "[]")
			return
		}
		_ = json.NewEncoder(w).Encode([]dealOut{d})
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// create creates the deal of one execution.
func (s *mcpServer) create(in dealIn) dealOut {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executions[in.EventID]++
	d := dealOut{DealID: fmt.Sprintf("deal-%d", len(s.deals)+1), EventID: in.EventID}
	s.deals[in.EventID] = d
	return d
}

func (s *mcpServer) count(eventID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executions[eventID]
}

func (s *mcpServer) method(m string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.methods[m]
}

// counting counts the JSON-RPC methods the server receives, and for a
// call with an event id starting "drop-" runs the tool once and then
// drops the connection without an answer, as a server that crashed
// after acting would.
func (s *mcpServer) counting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Arguments dealIn `json:"arguments"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &msg)
		s.mu.Lock()
		if msg.Method != "" {
			s.methods[msg.Method]++
		}
		ev := msg.Params.Arguments.EventID
		drop := msg.Method == "tools/call" && strings.HasPrefix(ev, "drop-") && !s.dropped[ev]
		s.dropped[ev] = s.dropped[ev] || drop
		s.mu.Unlock()
		if !drop {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
}

// exchange is one HTTP exchange an MCP client made: its request body and
// the answer's header and body.
type exchange struct {
	req    []byte
	header http.Header
	body   *bytes.Buffer
}

// recorder is an HTTP transport that keeps the exchanges of a client,
// with the agent's bearer token on every request.
type recorder struct {
	mu        sync.Mutex
	exchanges []*exchange
}

func (rc *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	r.Header.Set("Authorization", "Bearer agent-7")
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	ex := &exchange{req: body, header: resp.Header.Clone(), body: new(bytes.Buffer)}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, lockedWriter{&rc.mu, ex.body}), resp.Body}
	rc.mu.Lock()
	rc.exchanges = append(rc.exchanges, ex)
	rc.mu.Unlock()
	return resp, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// call returns the exchange of the client's last tools/call of tool,
// its request's JSON-RPC id and its answer's body.
func (rc *recorder) call(t *testing.T, tool string) (ex *exchange, id string, body string) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i := len(rc.exchanges) - 1; i >= 0; i-- {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		e := rc.exchanges[i]
		if json.Unmarshal(e.req, &m) == nil && m.Method == "tools/call" && m.Params.Name == tool {
			return e, string(m.ID), e.body.String()
		}
	}
	t.Fatalf("the client made no call of %s", tool)
	return nil, "", ""
}

// agent is one MCP client session through the gateway, on a connection
// and session of its own, as an agent runtime opens one after a failure.
type agent struct {
	cs       *mcpsdk.ClientSession
	rec      *recorder
	progress atomic.Int64
	onFirst  func()
}

func connectAgent(t *testing.T, endpoint string, onProgress func()) *agent {
	t.Helper()
	a := &agent{rec: &recorder{}, onFirst: onProgress}
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "agent", Version: "1.0.0"}, &mcpsdk.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcpsdk.ProgressNotificationClientRequest) {
			if a.progress.Add(1) == 1 && a.onFirst != nil {
				a.onFirst()
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcpsdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: a.rec}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	a.cs = cs
	return a
}

// callTool calls tool with args, bounded in time.
func (a *agent) callTool(tool string, args any, progress bool) (*mcpsdk.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := &mcpsdk.CallToolParams{Name: tool, Arguments: args}
	if progress {
		p.SetProgressToken("progress-1")
	}
	return a.cs.CallTool(ctx, p)
}

// dealOf is the deal a tool result carries as structured content.
func dealOf(t *testing.T, res *mcpsdk.CallToolResult) dealOut {
	t.Helper()
	if res.IsError {
		t.Fatalf("the tool result is an error: %+v", res.Content)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var d dealOut
	if err := json.Unmarshal(b, &d); err != nil || d.DealID == "" {
		t.Fatalf("no deal in the tool result %s", b)
	}
	return d
}

// rpcError is the JSON-RPC error a call failed with.
func rpcError(t *testing.T, err error) *jsonrpc.Error {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("want a JSON-RPC error, got %v", err)
	}
	return we
}

func TestMCPToolCallsExecuteOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		srv := startMCPServer(t)
		gw := startGateway(t, gatewayConfig{
			store:    be.store(t),
			upstream: strings.TrimPrefix(srv.srv.URL, "http://"),
			rules:    mcpRoutes,
			env:      []string{"MCP_CRM_URL=" + srv.srv.URL},
		})

		t.Run("answered, then replayed with the retry's own id", func(t *testing.T) {
			first := connectAgent(t, gw.url+"/mcp", nil)
			args := dealIn{EventID: "evt-1", Name: "Acme renewal", Amount: 1200}
			res, err := first.callTool("create_deal", args, false)
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			deal := dealOf(t, res)
			ex, _, _ := first.rec.call(t, "create_deal")
			if ex.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("the first call was answered as a replay")
			}

			// The agent's retry: a new connection and session, another
			// JSON-RPC id (a tools/list first moves the session's ids on).
			retry := connectAgent(t, gw.url+"/mcp", nil)
			if _, err := retry.cs.ListTools(context.Background(), nil); err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			res, err = retry.callTool("create_deal", args, false)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if got := dealOf(t, res); got != deal {
				t.Fatalf("the retry got deal %+v, the first call %+v", got, deal)
			}
			ex, id, body := retry.rec.call(t, "create_deal")
			_, firstID, _ := first.rec.call(t, "create_deal")
			if ex.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the retry's answer is no replay: %v", ex.header)
			}
			var msg struct {
				ID json.RawMessage `json:"id"`
			}
			if err := json.Unmarshal([]byte(body), &msg); err != nil || string(msg.ID) != id || id == firstID {
				t.Fatalf("the replay's id is %s, the retry's %s (the first call's %s): %s", msg.ID, id, firstID, body)
			}
			if n := srv.count("evt-1"); n != 1 {
				t.Fatalf("create_deal ran %d times for one deal", n)
			}
			t.Logf("one execution; the retry (id %s, the first %s) got %s", id, firstID, body)
		})

		t.Run("tools/list and an unlisted tool pass through every time", func(t *testing.T) {
			a := connectAgent(t, gw.url+"/mcp", nil)
			before, lists := srv.method("tools/list"), srv.listCalls.Load()
			for range 2 {
				if _, err := a.cs.ListTools(context.Background(), nil); err != nil {
					t.Fatalf("tools/list: %v", err)
				}
				if _, err := a.callTool("list_deals", map[string]any{}, false); err != nil {
					t.Fatalf("list_deals: %v", err)
				}
			}
			if got := srv.method("tools/list") - before; got != 2 {
				t.Fatalf("the server got %d of 2 tools/list", got)
			}
			if got := srv.listCalls.Load() - lists; got != 2 {
				t.Fatalf("list_deals ran %d of 2 times", got)
			}
			ex, _, _ := a.rec.call(t, "list_deals")
			if ex.header.Get("Idempotent-Replayed") != "" {
				t.Fatal("an unlisted tool's call was replayed")
			}
		})

		t.Run("an event stream with progress streams through, and replays as one event", func(t *testing.T) {
			var once sync.Once
			a := connectAgent(t, gw.url+"/mcp-sse", func() { once.Do(func() { close(srv.progressed) }) })
			args := dealIn{EventID: "evt-sse", Name: "Streamed", Amount: 5}
			res, err := a.callTool("progress_deal", args, true)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			deal := dealOf(t, res)
			// The tool went on only once the client had seen its first
			// progress notification: the stream came through as it came.
			// (The later ones may reach the SDK's handler after the result.)
			if n := a.progress.Load(); n < 1 {
				t.Fatalf("the client saw no progress notification")
			}
			ex, _, _ := a.rec.call(t, "progress_deal")
			if ct := ex.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("the first answer came as %q", ct)
			}

			retry := connectAgent(t, gw.url+"/mcp-sse", nil)
			_, _ = retry.cs.ListTools(context.Background(), nil)
			res, err = retry.callTool("progress_deal", args, true)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if got := dealOf(t, res); got != deal {
				t.Fatalf("the retry got %+v, the first %+v", got, deal)
			}
			ex, id, body := retry.rec.call(t, "progress_deal")
			if ex.header.Get("Idempotent-Replayed") != "true" || !strings.HasPrefix(ex.header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("the retry's answer: %v", ex.header)
			}
			if !strings.HasPrefix(body, "event: message\ndata: ") || !strings.Contains(body, `"id":`+id+`,`) || strings.Count(body, "data: ") != 1 {
				t.Fatalf("the replay is not one message event with the retry's id %s: %q", id, body)
			}
			if n := srv.count("evt-sse"); n != 1 {
				t.Fatalf("progress_deal ran %d times", n)
			}
		})

		t.Run("five parallel calls, one execution", func(t *testing.T) {
			agents := make([]*agent, 5)
			for i := range agents {
				agents[i] = connectAgent(t, gw.url+"/mcp", nil)
			}
			deals := make([]dealOut, 5)
			errs := make([]error, 5)
			together(5, func(i int) {
				var res *mcpsdk.CallToolResult
				res, errs[i] = agents[i].callTool("slow_deal", dealIn{EventID: "evt-par", Name: "Parallel", Amount: 1}, false)
				if errs[i] == nil {
					b, _ := json.Marshal(res.StructuredContent)
					_ = json.Unmarshal(b, &deals[i])
				}
			})
			for i := range 5 {
				if errs[i] != nil || deals[i] != deals[0] || deals[i].DealID == "" {
					t.Fatalf("call %d: %+v, %v (call 0: %+v)", i, deals[i], errs[i], deals[0])
				}
			}
			if n := srv.count("evt-par"); n != 1 {
				t.Fatalf("slow_deal ran %d times for five parallel calls", n)
			}
			replayed := 0
			for _, a := range agents {
				if ex, _, _ := a.rec.call(t, "slow_deal"); ex.header.Get("Idempotent-Replayed") == "true" {
					replayed++
				}
			}
			if replayed != 4 {
				t.Fatalf("%d of the 4 duplicates were replays", replayed)
			}
		})

		t.Run("executed, connection dropped: the retry is held", func(t *testing.T) {
			first := connectAgent(t, gw.url+"/mcp", nil)
			args := dealIn{EventID: "drop-held", Name: "Dropped", Amount: 3, APIKey: "sk_live_e2e_s3cr3t"}
			if _, err := first.callTool("create_deal", args, false); err == nil {
				t.Fatal("the call whose answer was dropped succeeded")
			}
			retry := connectAgent(t, gw.url+"/mcp", nil)
			_, _ = retry.cs.ListTools(context.Background(), nil) // another JSON-RPC id for the retry
			_, err := retry.callTool("create_deal", args, false)
			we := rpcError(t, err)
			if we.Code != -32009 {
				t.Fatalf("the retry got code %d, want -32009 (outcome-unknown): %v", we.Code, we)
			}
			var data struct {
				Type     string `json:"type"`
				Status   int    `json:"status"`
				RecordID string `json:"record_id"`
			}
			if err := json.Unmarshal(we.Data, &data); err != nil || data.Status != 409 || !strings.HasSuffix(data.Type, "#outcome-unknown") || data.RecordID == "" {
				t.Fatalf("error.data: %s", we.Data)
			}
			ex, id, body := retry.rec.call(t, "create_deal")
			_, firstID, _ := first.rec.call(t, "create_deal")
			if ct := ex.header.Get("Content-Type"); ct != "application/json" || id == firstID || !strings.Contains(body, `"id":`+id+`,`) {
				t.Fatalf("the held answer to id %s (the first call's %s) came as %q: %s", id, firstID, ct, body)
			}
			if n := srv.count("drop-held"); n != 1 {
				t.Fatalf("create_deal ran %d times", n)
			}
			// The held record names the tool and shows its arguments to
			// operators, the credential redacted; no log holds it.
			code, raw := adminDo(t, gw, "GET", "/idempotency/records/"+data.RecordID, "")
			var rec struct {
				State     string `json:"state"`
				Tool      string `json:"tool"`
				Arguments string `json:"arguments"`
			}
			if err := json.Unmarshal(raw, &rec); err != nil || code != http.StatusOK || rec.State != "outcome_unknown" || rec.Tool != "create_deal" ||
				!strings.Contains(rec.Arguments, `"event_id":"drop-held"`) || !strings.Contains(rec.Arguments, `"api_key":"[redacted]"`) ||
				strings.Contains(string(raw), "s3cr3t") {
				t.Fatalf("the held record in the admin API: %d %s", code, raw)
			}
			if strings.Contains(gw.logs.String(), "s3cr3t") {
				t.Fatal("the gateway logged the tool call's credential")
			}
			t.Logf("the held record: tool %s, arguments %s", rec.Tool, rec.Arguments)
		})

		t.Run("executed, connection dropped: the retry is verified", func(t *testing.T) {
			first := connectAgent(t, gw.url+"/mcp-verified", nil)
			args := dealIn{EventID: "drop-verified", Name: "Dropped, verified", Amount: 4}
			if _, err := first.callTool("create_deal", args, false); err == nil {
				t.Fatal("the call whose answer was dropped succeeded")
			}
			retry := connectAgent(t, gw.url+"/mcp-verified", nil)
			_, _ = retry.cs.ListTools(context.Background(), nil)
			res, err := retry.callTool("create_deal", args, false)
			if err != nil {
				t.Fatalf("the verified retry: %v", err)
			}
			if d := dealOf(t, res); d.EventID != "drop-verified" {
				t.Fatalf("the verified retry got %+v", d)
			}
			if n := srv.count("drop-verified"); n != 1 {
				t.Fatalf("create_deal ran %d times", n)
			}
		})
	})
}
