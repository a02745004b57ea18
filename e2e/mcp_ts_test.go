package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needNode skips a test when node or npm is missing, or fails it where
// IDEMGATE_REQUIRE_NODE=1 (CI).
func needNode(t *testing.T, why string) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, tool+" is not installed ("+why+")")
		}
	}
}

// unavailable skips the test with msg, or fails it where
// IDEMGATE_REQUIRE_NODE=1.
func unavailable(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("IDEMGATE_REQUIRE_NODE") == "1" {
		t.Fatal(msg + " (IDEMGATE_REQUIRE_NODE=1)")
	}
	t.Skip(msg + "; IDEMGATE_REQUIRE_NODE=1 makes this a failure")
}

// TestMCPTypeScriptClient runs an agent's client made with the official
// TypeScript SDK (e2e/testdata/mcp-ts, installed by npm from its lock
// file into a temp dir) against the Go SDK's server through the gateway:
// the call answered, its retry on a new session replayed with its own
// id, and the retry of a call whose answer the server dropped held with
// a JSON-RPC error.
func TestMCPTypeScriptClient(t *testing.T) {
	needNode(t, "the TypeScript SDK's client runs on node")
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "agent.mjs"} {
		b, err := os.ReadFile(filepath.Join("testdata", "mcp-ts", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	install.Dir = dir
	install.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(os.TempDir(), "idemgate-e2e-npm-cache"))
	if out, err := runBounded(install, 5*time.Minute); err != nil {
		unavailable(t, "npm could not install @modelcontextprotocol/sdk: "+err.Error()+"\n"+out)
	}

	srv := startMCPServer(t)
	gw := startGateway(t, gatewayConfig{
		store:    "embedded",
		upstream: strings.TrimPrefix(srv.srv.URL, "http://"),
		rules:    mcpRoutes,
		env:      []string{"MCP_CRM_URL=" + srv.srv.URL},
	})
	agent := exec.Command("node", "agent.mjs", gw.url+"/mcp")
	agent.Dir = dir
	out, err := runBounded(agent, time.Minute)
	if err != nil {
		t.Fatalf("the TypeScript agent: %v\n%s", err, out)
	}
	var got struct {
		First, Retry dealOut
		Dropped      string
		Held         struct {
			Code int
			Data struct {
				Type     string `json:"type"`
				RecordID string `json:"record_id"`
			}
		}
		Seen []struct {
			ID          json.RawMessage
			Replayed    *string
			ContentType string
			Body        string
		}
	}
	line := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("the agent's output: %v\n%s", err, out)
	}
	t.Logf("the TypeScript agent saw: %s", line)
	if got.First.DealID == "" || got.Retry != got.First {
		t.Fatalf("the first call got %+v, its retry %+v", got.First, got.Retry)
	}
	if n := srv.count("evt-ts"); n != 1 {
		t.Fatalf("create_deal ran %d times", n)
	}
	if len(got.Seen) < 2 || got.Seen[0].Replayed != nil || got.Seen[1].Replayed == nil || *got.Seen[1].Replayed != "true" {
		t.Fatalf("the exchanges: %+v", got.Seen)
	}
	var replay struct{ ID json.RawMessage }
	if err := json.Unmarshal([]byte(got.Seen[1].Body), &replay); err != nil || string(replay.ID) != string(got.Seen[1].ID) || string(got.Seen[1].ID) == string(got.Seen[0].ID) {
		t.Fatalf("the replay %s answers id %s, the retry sent %s, the first %s", got.Seen[1].Body, replay.ID, got.Seen[1].ID, got.Seen[0].ID)
	}
	if got.Dropped != "failed" || got.Held.Code != -32009 || !strings.HasSuffix(got.Held.Data.Type, "#outcome-unknown") || got.Held.Data.RecordID == "" {
		t.Fatalf("the dropped call %s, its retry %+v", got.Dropped, got.Held)
	}
	if n := srv.count("drop-ts"); n != 1 {
		t.Fatalf("the dropped create_deal ran %d times", n)
	}
}

// runBounded runs cmd, killed after limit, and returns its output.
func runBounded(cmd *exec.Cmd, limit time.Duration) (string, error) {
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), errTimeout(limit)
	}
}

type errTimeout time.Duration

func (e errTimeout) Error() string { return "did not finish in " + time.Duration(e).String() }
