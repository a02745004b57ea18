package mcp

import (
	"bytes"
	"mime"
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"
)

// Tap sits between the upstream's answer to a guarded call and the
// gateway's capture of it. Everything written to it goes on to the
// capture at once (an event stream reaches the client as it comes, each
// flush passed on); from an event stream it keeps the JSON-RPC response
// to the call, the one message the gateway stores. An application/json
// answer is the capture's to hold: Answer reads it from there.
type Tap struct {
	w   http.ResponseWriter
	id  string // the call's JSON-RPC id
	max int    // the largest event kept, in bytes

	status int
	sse    bool
	p      sseParser
	found  []byte // the response to the call, once seen
	large  bool   // an event too large to keep went by
}

// NewTap taps the answer to call written to w (the capture), keeping
// events of at most max bytes.
func NewTap(w http.ResponseWriter, call Call, max int64) *Tap {
	return &Tap{w: w, id: call.ID, max: int(min(max, 1<<30))}
}

// Status is the status the answer came with; 0 before one.
func (t *Tap) Status() int { return t.status }

// Header is the capture's header map.
func (t *Tap) Header() http.Header { return t.w.Header() }

// WriteHeader notes whether the answer is an event stream and passes
// the status on.
func (t *Tap) WriteHeader(status int) {
	if t.status == 0 && status >= 200 {
		t.status = status
		mt, _, _ := mime.ParseMediaType(t.w.Header().Get("Content-Type"))
		t.sse = mt == "text/event-stream"
	}
	t.w.WriteHeader(status)
}

// Write passes p on, then reads the events it completes.
func (t *Tap) Write(p []byte) (int, error) {
	if t.status == 0 {
		t.WriteHeader(http.StatusOK)
	}
	n, err := t.w.Write(p)
	if t.sse && t.found == nil {
		t.p.feed(p[:n], t.max, t.event)
	}
	return n, err
}

// FlushError flushes the capture: an event stream's flush reaches the
// client.
func (t *Tap) FlushError() error { return http.NewResponseController(t.w).Flush() }

// Flush implements http.Flusher.
func (t *Tap) Flush() { _ = t.FlushError() }

// Unwrap is the capture, for http.ResponseController.
func (t *Tap) Unwrap() http.ResponseWriter { return t.w }

// event reads one dispatched event: a JSON-RPC response with the call's
// id is the one kept.
func (t *Tap) event(typ string, data []byte, over bool) {
	if typ != "" && typ != "message" {
		return
	}
	if over {
		t.large = true
		return
	}
	if IsResponseTo(data, t.id) {
		t.found = bytes.Clone(data)
	}
}

// Answer is the upstream's answer to a guarded call, as the gateway
// stores it.
type Answer struct {
	// Message is the JSON-RPC response to the call; nil when none came.
	Message []byte
	// SSE: it came in an event stream.
	SSE bool
	// ToolError: the response's result says isError: true.
	ToolError bool
	// Missing says why there is no Message: "stream_ended" (the stream
	// ended before the response), "response_too_large" (an event or
	// body larger than max_response went by), "no_response" (a JSON
	// body that is not the response to the call).
	Missing string
}

// Answer is what came back for the call. body is the JSON body the
// capture held (an application/json answer), omitted whether it was
// too large to hold.
func (t *Tap) Answer(body []byte, omitted bool) Answer {
	a := Answer{SSE: t.sse}
	switch {
	case t.sse && t.found != nil:
		a.Message = t.found
	case t.sse && t.large:
		a.Missing = "response_too_large"
	case t.sse:
		a.Missing = "stream_ended"
	case omitted:
		a.Missing = "response_too_large"
	case IsResponseTo(body, t.id):
		a.Message = body
	default:
		a.Missing = "no_response"
	}
	if a.Message != nil {
		a.ToolError = gjson.GetBytes(a.Message, "result.isError").Type == gjson.True
	}
	return a
}

// IsResponseTo reports whether msg is one JSON-RPC response (a result or
// an error, no method) whose id is id (JSON text): the same string, or
// the same number however written (1 and 1.0).
func IsResponseTo(msg []byte, id string) bool {
	if !gjson.ValidBytes(msg) {
		return false
	}
	doc := gjson.ParseBytes(msg)
	if !doc.IsObject() || doc.Get("method").Exists() || !doc.Get("result").Exists() && !doc.Get("error").Exists() {
		return false
	}
	return SameID(doc.Get("id"), gjson.Parse(id))
}

// SameID reports whether two JSON-RPC ids are the same.
func SameID(a, b gjson.Result) bool {
	switch {
	case a.Type == gjson.String && b.Type == gjson.String:
		return a.Str == b.Str
	case a.Type == gjson.Number && b.Type == gjson.Number:
		if a.Raw == b.Raw {
			return true
		}
		x, err1 := strconv.ParseFloat(a.Raw, 64)
		y, err2 := strconv.ParseFloat(b.Raw, 64)
		return err1 == nil && err2 == nil && x == y
	}
	return false
}

// sseParser reads an event stream (the WHATWG EventSource rules): lines
// end in CRLF, LF or CR; "data" lines add to the event's data (joined
// with LF), "event" sets its type, a blank line dispatches it; comments
// and other fields are skipped. An event whose data grows past max is
// dispatched as over, without its data.
type sseParser struct {
	line   []byte // the line being read
	skip   bool   // the line is past max: its rest is dropped
	lastCR bool   // the previous chunk ended in CR: an LF next ends nothing
	typ    string
	data   []byte
	has    bool // the event has a data line
	over   bool // the event's data went past max
}

// feed reads p, dispatching each event it completes to dispatch.
func (s *sseParser) feed(p []byte, max int, dispatch func(typ string, data []byte, over bool)) {
	for len(p) > 0 {
		if s.lastCR && p[0] == '\n' {
			p = p[1:]
			s.lastCR = false
			continue
		}
		s.lastCR = false
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.add(p, max)
			return
		}
		s.add(p[:i], max)
		s.lastCR = p[i] == '\r'
		p = p[i+1:]
		if s.lastCR && len(p) > 0 && p[0] == '\n' {
			p = p[1:]
			s.lastCR = false
		}
		s.endLine(max, dispatch)
	}
}

// add adds b to the line being read, bounded by max.
func (s *sseParser) add(b []byte, max int) {
	if s.skip {
		return
	}
	if len(s.line)+len(b) > max+len("data: ") {
		s.skip, s.line = true, s.line[:0]
		return
	}
	s.line = append(s.line, b...)
}

// endLine reads a complete line.
func (s *sseParser) endLine(max int, dispatch func(typ string, data []byte, over bool)) {
	line, skipped := s.line, s.skip
	s.line, s.skip = s.line[:0], false
	if skipped {
		// Only a data line grows past the bound worth keeping.
		s.has, s.over = true, true
		return
	}
	if len(line) == 0 {
		if s.has {
			dispatch(s.typ, s.data, s.over)
		}
		s.typ, s.data, s.has, s.over = "", s.data[:0], false, false
		return
	}
	if line[0] == ':' {
		return // a comment
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "event":
		s.typ = string(value)
	case "data":
		if s.over {
			return
		}
		if s.has {
			s.data = append(s.data, '\n')
		}
		s.has = true
		if len(s.data)+len(value) > max {
			s.over, s.data = true, s.data[:0]
			return
		}
		s.data = append(s.data, value...)
	}
}
