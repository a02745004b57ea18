package mcp

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkMatch reads a typical tools/call body (about 300 bytes).
func BenchmarkMatch(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"create_deal","arguments":{"event_id":"evt_8812","title":"Acme renewal","amount":4200,"currency":"EUR","owner":"sales-emea"},"_meta":{"progressToken":"tok-42"}}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := tools.Match(body); v != Guard {
			b.Fatal(v)
		}
	}
}

// BenchmarkTapEventStream taps an event stream of ten progress
// notifications and the response, written in pieces of 512 bytes.
func BenchmarkTapEventStream(b *testing.B) {
	var sb strings.Builder
	for range 10 {
		sb.WriteString("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"tok-42\",\"progress\":1,\"total\":10}}\n\n")
	}
	sb.WriteString("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"" + strings.Repeat("d", 2000) + "\"}]}}\n\n")
	stream := []byte(sb.String())
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		tap := NewTap(httptest.NewRecorder(), Call{ID: "42"}, 1<<20)
		tap.Header().Set("Content-Type", "text/event-stream")
		tap.WriteHeader(200)
		for s := stream; len(s) > 0; {
			n := min(512, len(s))
			_, _ = tap.Write(s[:n])
			s = s[n:]
		}
		if tap.Answer(nil, false).Message == nil {
			b.Fatal("no response")
		}
	}
}
