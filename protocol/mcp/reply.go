package mcp

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/idemgate/idemgate/problem"
)

// Reply is the stored answer to a call, made the answer to a retry whose
// JSON-RPC id is id: a stored JSON-RPC response with id in place of its
// own; or a JSON object stored without one, as the result of a response
// with id: a tool result as it is (an operator's completion giving
// "content"), any other object (the upstream's record of the operation,
// found by a verification lookup) as a tool result whose structured
// content it is, with its JSON as text content. ok is false when the
// stored body is none of these.
func Reply(stored []byte, id string) (msg []byte, ok bool) {
	if id == "" || !gjson.ValidBytes(stored) {
		return nil, false
	}
	doc := gjson.ParseBytes(stored)
	if !doc.IsObject() {
		return nil, false
	}
	member, raw := "result", doc.Raw
	switch {
	case !doc.Get("jsonrpc").Exists() && !doc.Get("id").Exists() && !doc.Get("content").Exists():
		text, err := json.Marshal(doc.Raw)
		if err != nil {
			return nil, false
		}
		raw = `{"content":[{"type":"text","text":` + string(text) + `}],"structuredContent":` + doc.Raw + `}`
	case doc.Get("jsonrpc").Exists() || doc.Get("id").Exists():
		switch r, e := doc.Get("result"), doc.Get("error"); {
		case r.Exists():
			raw = r.Raw
		case e.Exists():
			member, raw = "error", e.Raw
		default:
			return nil, false
		}
	}
	b := make([]byte, 0, len(raw)+len(id)+40)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"`...)
	b = append(b, member...)
	b = append(b, `":`...)
	b = append(b, raw...)
	return append(b, '}'), true
}

// AcceptsSSE reports whether a request's Accept header lists
// text/event-stream.
func AcceptsSSE(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		for _, r := range strings.Split(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(r)); err == nil && mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// IsSSE reports whether a stored header is that of an event stream.
func IsSSE(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "text/event-stream"
}

// Unreplayed are the stored headers a replay leaves out: its body is
// another than the one they describe, and the session is the retry's.
var Unreplayed = []string{"Content-Type", "Content-Length", "Content-Encoding", "Mcp-Session-Id", "Etag", "Last-Modified"}

// WriteReplay writes msg, a stored response made the retry's (Reply),
// with the stored header (less Unreplayed) and Idempotent-Replayed: as
// one SSE message event when sse, else as application/json.
func WriteReplay(w http.ResponseWriter, stored http.Header, msg []byte, sse bool) error {
	hdr := w.Header()
	for name, values := range stored {
		hdr[name] = values
	}
	for _, name := range Unreplayed {
		hdr.Del(name)
	}
	hdr.Set("Idempotent-Replayed", "true")
	body := msg
	if sse {
		body = Event(msg)
		hdr.Set("Content-Type", "text/event-stream")
		hdr.Set("Cache-Control", "no-cache")
	} else {
		hdr.Set("Content-Type", "application/json")
	}
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(body)
	return err
}

// Event is msg as one SSE message event: a data line for each of its
// lines.
func Event(msg []byte) []byte {
	b := make([]byte, 0, len(msg)+24)
	b = append(b, "event: message\n"...)
	for _, line := range bytes.Split(bytes.ReplaceAll(msg, []byte("\r\n"), []byte("\n")), []byte("\n")) {
		b = append(b, "data: "...)
		b = append(b, bytes.TrimSuffix(line, []byte("\r"))...)
		b = append(b, '\n')
	}
	return append(b, '\n')
}

// Codes are the JSON-RPC error codes of the gateway's answers on an MCP
// route, one per problem type (docs/mcp.md): the problem type's name
// (its fragment in problem.Base) to the code, in -32000..-32099, the
// range JSON-RPC leaves to implementations. A type not listed gets
// CodeOther.
var Codes = map[string]int{
	"key-missing":       -32001,
	"key-invalid":       -32002,
	"malformed-body":    -32003,
	"body-too-deep":     -32004,
	"unreadable-body":   -32005,
	"body-too-large":    -32006,
	"key-reused":        -32007,
	"in-flight":         -32008,
	"outcome-unknown":   -32009,
	"breaker-open":      -32010,
	"retries-exhausted": -32011,
	"signature-invalid": -32012,
	"expired":           -32013,
	"same-payload":      -32014,
	"store-unavailable": -32015,
	"ambiguous-call":    -32016,
	"busy":              -32017,
}

// CodeOther is the code of a problem type Codes does not list.
const CodeOther = -32000

// Code is the JSON-RPC error code of p.
func Code(p problem.Problem) int {
	_, name, _ := strings.Cut(p.Type, "#")
	if c, ok := Codes[name]; ok {
		return c
	}
	return CodeOther
}

// errorData is a problem as error.data: the problem object, with its
// Retry-After seconds.
type errorData struct {
	problem.Problem
	RetryAfter int `json:"retry_after,omitempty"`
}

// WriteError answers the call with JSON-RPC id id ("": none could be
// read, null) with p as a JSON-RPC error, HTTP 200: error.code Code(p),
// error.message p's title, error.data the problem object. The
// Retry-After header is set as on the problem.
func WriteError(w http.ResponseWriter, id string, p problem.Problem) error {
	if id == "" {
		id = "null"
	}
	data, err := json.Marshal(errorData{Problem: p, RetryAfter: p.RetryAfter})
	if err != nil {
		return err
	}
	msg, err := json.Marshal(struct {
		Message string          `json:"message"`
		Code    int             `json:"code"`
		Data    json.RawMessage `json:"data"`
	}{p.Title, Code(p), data})
	if err != nil {
		return err
	}
	body := make([]byte, 0, len(msg)+len(id)+40)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = append(body, id...)
	body = append(body, `,"error":`...)
	body = append(body, msg...)
	body = append(body, '}')
	return p.WriteAs(w, "application/json", http.StatusOK, body)
}
