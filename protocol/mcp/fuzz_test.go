package mcp

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// FuzzMatch: no body crashes or stalls Match; a guarded call's id is a
// JSON string or number and its tool is listed; the exact reading of a
// guarded call agrees with encoding/json's (names exactly, the last of a
// name given twice), and a body encoding/json reads as a guarded call
// whatever the case of its names is never passed unguarded.
func FuzzMatch(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_deal","arguments":{"event_id":"e1"}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"send_invoice","_meta":{"progressToken":1}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_deal"}}]`,
		`{"jsonrpc":"2.0","id":1,"Method":"tools/call","method":"x","params":{"name":"create_deal"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"NAME":"create_deal","name":"x"}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		``, `{`, `"tools/call"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, call := tools.Match(body)
		var folded struct { // encoding/json matches names in any case
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
			Params  struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		err := json.Unmarshal(body, &folded)
		guardedFolded := err == nil && folded.JSONRPC == "2.0" && folded.Method == Method && tools[folded.Params.Name] &&
			len(folded.ID) > 0 && (folded.ID[0] == '"' || folded.ID[0] == '-' || folded.ID[0] >= '0' && folded.ID[0] <= '9')
		switch v {
		case Guard:
			var id any
			if json.Unmarshal([]byte(call.ID), &id) != nil {
				t.Fatalf("id %q is not JSON", call.ID)
			}
			switch id.(type) {
			case string, float64:
			default:
				t.Fatalf("id %q is neither a string nor a number", call.ID)
			}
			if !tools[call.Tool] {
				t.Fatalf("tool %q is not listed", call.Tool)
			}
		case Pass:
			if guardedFolded {
				t.Fatalf("passed unguarded a body encoding/json reads as a call of %s: %q", folded.Params.Name, body)
			}
		}
	})
}

// FuzzTap: no stream crashes the tap, every byte passes on, and a
// response found is one JSON-RPC response to the call, no larger than
// the bound.
func FuzzTap(f *testing.F) {
	f.Add([]byte(progressStream), 3)
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\r\r"), 1)
	f.Add([]byte(":\n\ndata\ndata:\n\n"), 2)
	f.Fuzz(func(t *testing.T, stream []byte, size int) {
		size = max(1, size%64+1)
		rec := httptest.NewRecorder()
		tap := NewTap(rec, Call{ID: "7"}, 256)
		tap.Header().Set("Content-Type", "text/event-stream")
		tap.WriteHeader(200)
		for s := stream; len(s) > 0; {
			n := min(size, len(s))
			_, _ = tap.Write(s[:n])
			s = s[n:]
		}
		if rec.Body.String() != string(stream) {
			t.Fatal("the stream did not pass on whole")
		}
		a := tap.Answer(nil, false)
		if a.Message != nil && (!IsResponseTo(a.Message, "7") || len(a.Message) > 256) {
			t.Fatalf("found %q", a.Message)
		}
	})
}

// readDoc reads docs/mcp.md.
func readDoc() (string, error) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "mcp.md"))
	return string(b), err
}

func itoa(n int) string { return strconv.Itoa(n) }
