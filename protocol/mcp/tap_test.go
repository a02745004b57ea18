package mcp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// tapped writes answer to a tap of the call with id in pieces of size
// bytes, with the content type ct, and returns what the tap found and
// what reached the writer behind it.
func tapped(t *testing.T, id, ct, answer string, size int, max int64) (Answer, *httptest.ResponseRecorder) {
	t.Helper()
	rec := httptest.NewRecorder()
	tap := NewTap(rec, Call{ID: id, Tool: "create_deal"}, max)
	tap.Header().Set("Content-Type", ct)
	tap.WriteHeader(http.StatusOK)
	for s := answer; len(s) > 0; {
		n := min(size, len(s))
		if _, err := tap.Write([]byte(s[:n])); err != nil {
			t.Fatal(err)
		}
		tap.Flush()
		s = s[n:]
	}
	body := rec.Body.Bytes()
	return tap.Answer(body, false), rec
}

const progressStream = ": keep-alive\n\n" +
	"event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n" +
	"data: {\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{\"content\":[]}}\n\n" + // another request's response
	"event: other\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"not a message event\"}]}}\n\n" +
	"event: message\ndata: {\"jsonrpc\":\"2.0\",\n" +
	"data:\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"deal-1\"}]}}\n\n"

const progressResponse = "{\"jsonrpc\":\"2.0\",\n\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"deal-1\"}]}}"

// Whatever the pieces the stream comes in, and whatever its line ends,
// the tap finds the response to its call, and passes every byte on.
func TestTapEventStream(t *testing.T) {
	t.Parallel()
	for _, ends := range []string{"\n", "\r\n", "\r"} {
		stream := strings.ReplaceAll(progressStream, "\n", ends)
		for _, size := range []int{1, 2, 3, 7, 64, len(stream)} {
			a, rec := tapped(t, "7", "text/event-stream; charset=utf-8", stream, size, 1<<20)
			if string(a.Message) != progressResponse || !a.SSE || a.Missing != "" {
				t.Fatalf("line ends %q, pieces of %d: %+v (%q)", ends, size, a, a.Message)
			}
			if rec.Body.String() != stream || !rec.Flushed {
				t.Fatalf("line ends %q, pieces of %d: the stream did not pass on whole and flushed", ends, size)
			}
		}
	}
}

func TestTapAnswers(t *testing.T) {
	t.Parallel()
	response := `{"jsonrpc":"2.0","id":"a","result":{"content":[],"isError":true}}`
	for _, tc := range []struct {
		name, id, ct, answer string
		max                  int64
		msg, missing         string
		toolError            bool
	}{
		{"JSON", `"a"`, "application/json", response, 1 << 20, response, "", true},
		{"JSON, another id", `"b"`, "application/json", response, 1 << 20, "", "no_response", false},
		{"JSON, not a response", `"a"`, "application/json", `{"jsonrpc":"2.0","id":"a","method":"x"}`, 1 << 20, "", "no_response", false},
		{"a stream that ends before the response", "7", "text/event-stream",
			"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,", 1 << 20, "", "stream_ended", false},
		{"a stream whose last event has no blank line", "7", "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n", 1 << 20, "", "stream_ended", false},
		{"a response event past max", "7", "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"text\":\"" + strings.Repeat("x", 200) + "\"}}\n\n", 100, "", "response_too_large", false},
		{"a response in many data lines past max", "7", "text/event-stream", strings.Repeat("data: 0123456789\n", 30) + "\n", 100, "", "response_too_large", false},
		{"a number id written otherwise", "7", "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":7.0,\"result\":{}}\n\n", 1 << 20, "{\"jsonrpc\":\"2.0\",\"id\":7.0,\"result\":{}}", "", false},
		{"a string id is no number", `"7"`, "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n", 1 << 20, "", "stream_ended", false},
		{"an error response", "7", "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32602,\"message\":\"bad\"}}\n\n", 1 << 20, "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32602,\"message\":\"bad\"}}", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tapped(t, tc.id, tc.ct, tc.answer, 5, tc.max)
			if string(a.Message) != tc.msg || a.Missing != tc.missing || a.ToolError != tc.toolError {
				t.Fatalf("Answer = %+v (%s), want message %s, missing %q, tool error %v", a, a.Message, tc.msg, tc.missing, tc.toolError)
			}
		})
	}
	tap := NewTap(httptest.NewRecorder(), Call{ID: "1"}, 100)
	if a := tap.Answer(nil, true); a.Missing != "response_too_large" {
		t.Fatalf("a JSON body past max_response: %+v", a)
	}
}
