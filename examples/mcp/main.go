// Command mcp shows an agent's retried tool call against an MCP server
// behind the gateway. The CRM's MCP server (made with the official MCP Go
// SDK, unmodified) has a create_deal tool that is slow today: the agent's
// first call times out, and its runtime retries on a new connection and
// MCP session, as agent runtimes do. The retry carries the same CRM event
// id the agent was handed, so the gateway (examples/mcp/routes.yaml) waits
// for the first call and answers the retry with its deal: the CRM holds
// one deal, not two.
//
// It starts the MCP server and a gateway (bin/idemgate, embedded store in
// a temporary directory) on free loopback ports, and stops both at the
// end. `make mcp-demo` builds and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/internal/proc"
)

func main() {
	idemgate := flag.String("idemgate", "bin/idemgate", "the gateway binary")
	rules := flag.String("rules", "examples/mcp/routes.yaml", "the gateway's route rules")
	flag.Parse()
	deals, err := run(*idemgate, *rules, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp demo:", err)
		os.Exit(1)
	}
	if deals != 1 {
		fmt.Fprintf(os.Stderr, "mcp demo: the CRM holds %d deals, want 1\n", deals)
		os.Exit(1)
	}
}

// crm is the CRM behind the MCP server: the deals its tool created.
type crm struct {
	mu    sync.Mutex
	deals map[string]string // deal id by event id, one per execution
	runs  int
}

// createDeal is the create_deal tool: the first execution takes its time.
func (c *crm) createDeal(ctx context.Context, req *mcp.CallToolRequest, in dealIn) (*mcp.CallToolResult, dealOut, error) {
	c.mu.Lock()
	c.runs++
	slow := c.runs == 1
	id := fmt.Sprintf("D-%d", 9020+c.runs)
	c.deals[in.EventID+"#"+id] = id
	c.mu.Unlock()
	if slow {
		time.Sleep(3 * time.Second)
	}
	return nil, dealOut{DealID: id, EventID: in.EventID}, nil
}

type dealIn struct {
	EventID string `json:"event_id" jsonschema:"the CRM event this deal is for, as given with the task"`
	Title   string `json:"title" jsonschema:"the deal's title"`
	Amount  int    `json:"amount" jsonschema:"the deal's amount"`
}

type dealOut struct {
	DealID  string `json:"deal_id"`
	EventID string `json:"event_id"`
}

// run runs the demo, printing to out, and returns how many deals the CRM
// holds at the end.
func run(idemgate, rules string, out *os.File) (int, error) {
	c := &crm{deals: map[string]string{}}
	server := mcp.NewServer(&mcp.Implementation{Name: "crm", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "create_deal", Description: "Create a deal in the CRM"}, c.createDeal)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{JSONResponse: true})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	gateway, gw, stop, err := startGateway(idemgate, rules, ln.Addr().String())
	if err != nil {
		return 0, err
	}
	defer stop()
	fmt.Fprintf(out, "MCP server on %s, the gateway in front of it on %s\n", ln.Addr(), gateway)

	// The agent's task came with the CRM event; its id is process state,
	// and the tool's arguments carry it.
	args := dealIn{EventID: fmt.Sprintf("evt_%d", time.Now().UnixNano()%1000000), Title: "Acme renewal", Amount: 4200}
	fmt.Fprintf(out, "agent: create_deal for event %s\n", args.EventID)

	// Attempt 1: the runtime gives the tool one second.
	if _, err := call(gateway+"/mcp", args, time.Second); err == nil {
		return 0, errors.New("the first call was answered in time; the demo needs it to time out")
	} else {
		fmt.Fprintf(out, "attempt 1: no answer in 1s (%v); the runtime retries on a new session\n", errors.Unwrap(err))
	}
	// Attempt 2: a new connection and session, another JSON-RPC id.
	res, err := call(gateway+"/mcp", args, 20*time.Second)
	if err != nil {
		return 0, fmt.Errorf("the retry: %w; the gateway's log ends:\n%s", err, gw.Tail(10))
	}
	fmt.Fprintf(out, "attempt 2: %s\n", res)
	// Attempt 3, later: answered from the record, at once.
	res, err = call(gateway+"/mcp", args, 5*time.Second)
	if err != nil {
		return 0, fmt.Errorf("the third call: %w", err)
	}
	fmt.Fprintf(out, "attempt 3: %s\n", res)

	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(out, "the CRM holds %d deal(s) for the event; create_deal ran %d time(s)\n", len(c.deals), c.runs)
	return len(c.deals), nil
}

// call makes one tool call on a new MCP session, within limit.
func call(endpoint string, args dealIn, limit time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	replayed := ""
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && resp.Header.Get("Idempotent-Replayed") == "true" {
			replayed = " (Idempotent-Replayed: true)"
		}
		return resp, err
	})}
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return "", err
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_deal", Arguments: args})
	if err != nil {
		// A runtime that gave up on a call opens a new session for the
		// retry and leaves this one; ending it (DELETE) would end the
		// server's running call with it.
		return "", fmt.Errorf("create_deal: %w", err)
	}
	_ = cs.Close()
	return fmt.Sprintf("deal %v%s", res.StructuredContent, replayed), nil
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// startGateway starts bin/idemgate in front of upstream with rules, the
// embedded store in a temporary directory, and returns its URL.
func startGateway(bin, rules, upstream string) (url string, p *proc.Process, stop func(), err error) {
	dir, err := os.MkdirTemp("", "idemgate-mcp-demo")
	if err != nil {
		return "", nil, nil, err
	}
	rulesPath, err := filepath.Abs(rules)
	if err != nil {
		return "", nil, nil, err
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return "", nil, nil, err
	}
	port, err := proc.FreePort()
	if err != nil {
		return "", nil, nil, err
	}
	caddyfile := fmt.Sprintf(`{
	admin off
	persist_config off
}
http://127.0.0.1:%d {
	bind 127.0.0.1
	idempotency {
		rules %s
		store embedded %s
	}
	reverse_proxy %s
}
`, port, rulesPath, filepath.Join(dir, "store"), upstream)
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(caddyfile), 0o600); err != nil {
		return "", nil, nil, err
	}
	p, err = proc.Start("gateway", proc.Options{LogDir: dir, WorkDir: dir, Env: []string{"XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}},
		bin, "run", "--config", filepath.Join(dir, "Caddyfile"), "--adapter", "caddyfile")
	if err != nil {
		return "", nil, nil, fmt.Errorf("%w (run make build)", err)
	}
	stop = func() {
		p.Stop()
		_ = os.RemoveAll(dir)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			conn.Close()
			return "http://" + addr, p, stop, nil
		}
		if !p.Running() || time.Now().After(deadline) {
			tail := p.Tail(20)
			stop()
			return "", nil, nil, fmt.Errorf("the gateway did not start:\n%s", tail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
