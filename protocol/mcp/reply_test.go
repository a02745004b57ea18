package mcp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/problem"
)

func TestReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, stored, id, want string
	}{
		{"a response", `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"ok"}]}}`, `"retry-9"`,
			`{"jsonrpc":"2.0","id":"retry-9","result":{"content":[{"type":"text","text":"ok"}]}}`},
		{"an error response", `{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad"}}`, `12`,
			`{"jsonrpc":"2.0","id":12,"error":{"code":-32602,"message":"bad"}}`},
		{"a tool result (an operator's completion)", `{"content":[{"type":"text","text":"done by hand"}]}`, `4`,
			`{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"done by hand"}]}}`},
		{"an upstream's object (a verification)", `{"deal_id":"d-1"}`, `4`,
			`{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"{\"deal_id\":\"d-1\"}"}],"structuredContent":{"deal_id":"d-1"}}}`},
		{"a response with neither result nor error", `{"jsonrpc":"2.0","id":3}`, `4`, ""},
		{"not JSON", `Bad Gateway`, `4`, ""},
		{"an array", `[1]`, `4`, ""},
		{"no id", `{"jsonrpc":"2.0","id":3,"result":{}}`, ``, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Reply([]byte(tc.stored), tc.id)
			if string(got) != tc.want || ok != (tc.want != "") {
				t.Fatalf("Reply = %s, %v; want %s", got, ok, tc.want)
			}
			if ok && !json.Valid(got) {
				t.Fatalf("Reply made invalid JSON: %s", got)
			}
		})
	}
}

func TestWriteReplay(t *testing.T) {
	t.Parallel()
	stored := http.Header{"Content-Type": {"text/event-stream"}, "Mcp-Session-Id": {"old-session"}, "X-Crm": {"1"}, "Content-Length": {"999"}}
	msg := []byte(`{"jsonrpc":"2.0","id":5,"result":{}}`)

	rec := httptest.NewRecorder()
	if err := WriteReplay(rec, stored, msg, true); err != nil {
		t.Fatal(err)
	}
	want := "event: message\ndata: " + string(msg) + "\n\n"
	if rec.Code != 200 || rec.Body.String() != want || rec.Header().Get("Content-Type") != "text/event-stream" ||
		rec.Header().Get("Idempotent-Replayed") != "true" || rec.Header().Get("Mcp-Session-Id") != "" || rec.Header().Get("X-Crm") != "1" {
		t.Fatalf("SSE replay: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}

	rec = httptest.NewRecorder()
	if err := WriteReplay(rec, stored, msg, false); err != nil {
		t.Fatal(err)
	}
	if rec.Body.String() != string(msg) || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Content-Length") != "36" {
		t.Fatalf("JSON replay: %v %q", rec.Header(), rec.Body)
	}
	if got := string(Event([]byte("{\"a\":\r\n1}"))); got != "event: message\ndata: {\"a\":\ndata: 1}\n\n" {
		t.Fatalf("Event of two lines: %q", got)
	}
}

func TestAcceptsSSE(t *testing.T) {
	t.Parallel()
	for accept, want := range map[string]bool{
		"application/json, text/event-stream": true,
		"text/event-stream;q=0.5":             true,
		"application/json":                    false,
		"*/*":                                 false,
		"":                                    false,
	} {
		if got := AcceptsSSE(http.Header{"Accept": {accept}}); got != want {
			t.Errorf("AcceptsSSE(%q) = %v", accept, got)
		}
	}
}

// Every problem type the gateway answers with has a code of its own in
// -32000..-32099, and docs/mcp.md lists each.
func TestCodes(t *testing.T) {
	t.Parallel()
	all := problem.All
	doc, err := readDoc()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]string{}
	for _, p := range all {
		c := Code(p)
		if c == CodeOther || c < -32099 || c > -32000 {
			t.Errorf("%s: code %d", p.Type, c)
		}
		if other, dup := seen[c]; dup {
			t.Errorf("%s and %s share code %d", p.Type, other, c)
		}
		seen[c] = p.Type
		_, name, _ := strings.Cut(p.Type, "#")
		if row := "| `" + itoa(c) + "` | [`" + name + "`]"; !strings.Contains(doc, row) {
			t.Errorf("docs/mcp.md has no row %q", row)
		}
	}
	if len(Codes) != len(all) {
		t.Errorf("Codes lists %d types, the test %d", len(Codes), len(all))
	}
}

func TestWriteError(t *testing.T) {
	t.Parallel()
	p := problem.Unknown.With("an earlier attempt reached the upstream", "deals")
	p.RecordID, p.RetryAfter = "0123", 12
	for id, want := range map[string]any{`"r-1"`: "r-1", `7`: float64(7), ``: nil} {
		rec := httptest.NewRecorder()
		if err := WriteError(rec, id, p); err != nil {
			t.Fatal(err)
		}
		var got struct {
			JSONRPC string `json:"jsonrpc"`
			ID      any    `json:"id"`
			Error   struct {
				Code    int            `json:"code"`
				Message string         `json:"message"`
				Data    map[string]any `json:"data"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v", rec.Body, err)
		}
		wantData := map[string]any{"type": p.Type, "title": p.Title, "status": float64(409), "detail": p.Detail,
			"route": "deals", "record_id": "0123", "retry_after": float64(12)}
		if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Retry-After") != "12" ||
			got.JSONRPC != "2.0" || got.ID != want || got.Error.Code != -32009 || got.Error.Message != p.Title || !reflect.DeepEqual(got.Error.Data, wantData) {
			t.Fatalf("id %q: %d %v %s", id, rec.Code, rec.Header(), rec.Body)
		}
	}
}
