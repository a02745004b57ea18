package caddymodule

import (
	"net/http"
	"strconv"
	"unicode/utf8"
)

// problemBase is where the problem types are documented.
const problemBase = "https://github.com/idemgate/idemgate/blob/main/docs/problems.md#"

// problem is an RFC 9457 problem detail. Titles follow the IETF
// Idempotency-Key draft where it names one.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Route    string   `json:"route,omitempty"`
	RecordID string   `json:"record_id,omitempty"`
	Tried    []string `json:"templates_tried,omitempty"`

	retryAfter int // seconds; 0 = no Retry-After header
}

var (
	probKeyMissing = problem{Type: problemBase + "key-missing", Title: "Idempotency-Key is missing", Status: http.StatusBadRequest}
	probKeyInvalid = problem{Type: problemBase + "key-invalid", Title: "Idempotency-Key is invalid", Status: http.StatusBadRequest}
	probBadJSON    = problem{Type: problemBase + "malformed-body", Title: "Request body is not valid JSON", Status: http.StatusBadRequest}
	probBadBody    = problem{Type: problemBase + "unreadable-body", Title: "Request body could not be read", Status: http.StatusBadRequest}
	probTooLarge   = problem{Type: problemBase + "body-too-large", Title: "Request body is too large", Status: http.StatusRequestEntityTooLarge}
	probKeyReused  = problem{Type: problemBase + "key-reused", Title: "Idempotency-Key is already used", Status: http.StatusUnprocessableEntity}
	probInFlight   = problem{Type: problemBase + "in-flight", Title: "A request is outstanding for this Idempotency-Key", Status: http.StatusConflict, retryAfter: 1}
	probUnknown    = problem{Type: problemBase + "outcome-unknown", Title: "Outcome unknown: the operation is held for an operator", Status: http.StatusConflict}
	probStoreDown  = problem{Type: problemBase + "store-unavailable", Title: "Idempotency store is unavailable", Status: http.StatusServiceUnavailable, retryAfter: 2}
)

// write sends p as application/problem+json.
func (p problem) write(w http.ResponseWriter) error {
	buf := getBuffer()
	defer putBuffer(buf)
	body := p.appendJSON(*buf)
	*buf = body
	hdr := w.Header()
	hdr.Set("Content-Type", "application/problem+json")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	hdr.Set("Cache-Control", "no-store")
	if p.retryAfter > 0 {
		hdr.Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.WriteHeader(p.Status)
	_, err := w.Write(body)
	return err
}

// appendJSON appends p as JSON, byte for byte what encoding/json's Marshal
// makes of it (field order, omitempty, HTML-safe escaping), without
// reflection.
func (p problem) appendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, p.Type)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, p.Title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(p.Status), 10)
	for _, f := range [...]struct{ name, value string }{
		{`,"detail":`, p.Detail}, {`,"route":`, p.Route}, {`,"record_id":`, p.RecordID},
	} {
		if f.value != "" {
			b = append(b, f.name...)
			b = appendJSONString(b, f.value)
		}
	}
	if len(p.Tried) > 0 {
		b = append(b, `,"templates_tried":[`...)
		for i, t := range p.Tried {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, t)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string escaped as encoding/json
// does by default: '"' and '\\' with a backslash; \b \f \n \r \t short;
// other control characters and the HTML-sensitive '<', '>' and '&' as
// \u00xx; U+2028 and U+2029 as \u2028 and \u2029; invalid UTF-8 as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// with returns a copy of p with detail and route set.
func (p problem) with(detail, route string) problem {
	p.Detail = detail
	p.Route = route
	return p
}
