// Package problem is the gateway's answers as RFC 9457 problem details
// (application/problem+json), one per refusal, documented in
// docs/problems.md.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Base is where the problem types are documented.
const Base = "https://github.com/idemgate/idemgate/blob/main/docs/problems.md#"

// Problem is an RFC 9457 problem detail. Titles follow the IETF
// Idempotency-Key draft where it names one.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Route    string `json:"route,omitempty"`
	RecordID string `json:"record_id,omitempty"`
	// Owner is who resolves the route's held operations (its owner).
	Owner string   `json:"owner,omitempty"`
	Tried []string `json:"templates_tried,omitempty"`
	// NextCheck is when a held record's outcome is checked next.
	NextCheck *time.Time `json:"next_check,omitempty"`
	// SameAs is the record of the operation completed under another key
	// with the same payload (same-payload).
	SameAs string `json:"same_as,omitempty"`

	RetryAfter int `json:"-"` // seconds; 0 = no Retry-After header
}

var (
	KeyMissing  = Problem{Type: Base + "key-missing", Title: "Idempotency-Key is missing", Status: http.StatusBadRequest}
	KeyInvalid  = Problem{Type: Base + "key-invalid", Title: "Idempotency-Key is invalid", Status: http.StatusBadRequest}
	BadJSON     = Problem{Type: Base + "malformed-body", Title: "Request body is not valid JSON", Status: http.StatusBadRequest}
	TooDeep     = Problem{Type: Base + "body-too-deep", Title: "Request body is nested too deeply", Status: http.StatusBadRequest}
	BadBody     = Problem{Type: Base + "unreadable-body", Title: "Request body could not be read", Status: http.StatusBadRequest}
	TooLarge    = Problem{Type: Base + "body-too-large", Title: "Request body is too large", Status: http.StatusRequestEntityTooLarge}
	KeyReused   = Problem{Type: Base + "key-reused", Title: "Idempotency-Key is already used", Status: http.StatusUnprocessableEntity}
	InFlight    = Problem{Type: Base + "in-flight", Title: "A request is outstanding for this Idempotency-Key", Status: http.StatusConflict, RetryAfter: 1}
	Unknown     = Problem{Type: Base + "outcome-unknown", Title: "Outcome unknown: the operation is held for an operator", Status: http.StatusConflict}
	BreakerOpen = Problem{Type: Base + "breaker-open", Title: "The upstream is failing: new executions are paused", Status: http.StatusServiceUnavailable}
	Exhausted   = Problem{Type: Base + "retries-exhausted", Title: "Retries exhausted: the operation is held for an operator", Status: http.StatusConflict}
	Signature   = Problem{Type: Base + "signature-invalid", Title: "The request's signature could not be verified", Status: http.StatusUnauthorized}
	Expired     = Problem{Type: Base + "expired", Title: "The operation's record has expired", Status: http.StatusConflict}
	SamePayload = Problem{Type: Base + "same-payload", Title: "The same payload completed under another key", Status: http.StatusConflict}
	Busy        = Problem{Type: Base + "busy", Title: "The gateway holds too many request bodies", Status: http.StatusServiceUnavailable, RetryAfter: 1}
	// AmbiguousCall: an MCP route's request that a server matching
	// member names in any case could read as a guarded tool call.
	AmbiguousCall = Problem{Type: Base + "ambiguous-call", Title: "The tool call can be read more than one way", Status: http.StatusBadRequest}
	StoreDown     = Problem{Type: Base + "store-unavailable", Title: "Idempotency store is unavailable", Status: http.StatusServiceUnavailable, RetryAfter: 2}
)

// All is every problem type the gateway answers with, in the order
// docs/problems.md lists them: a catalogue for tests and for the
// protocols that map each type to an error of their own (MCP's JSON-RPC
// codes).
var All = []Problem{KeyMissing, KeyInvalid, BadJSON, TooDeep, BadBody, TooLarge, KeyReused, InFlight, Unknown,
	BreakerOpen, Exhausted, Signature, Expired, SamePayload, StoreDown, AmbiguousCall, Busy}

// InFlightKeyTitle is InFlight's title when the key did not come from
// the Idempotency-Key header (a webhook's event id in the body, a query
// parameter, another header): the draft's title would name a header the
// request never sent.
const InFlightKeyTitle = "A request is outstanding for this key"

// KeyReusedKeyTitle is KeyReused's title when the key did not come from
// the Idempotency-Key header, for the same reason.
const KeyReusedKeyTitle = "The key is already used"

// Write sends p as application/problem+json.
func (p Problem) Write(w http.ResponseWriter) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return p.WriteAs(w, "application/problem+json", p.Status, body)
}

// WriteAs sends body, p told in another form (a protocol's own error,
// such as MCP's JSON-RPC error), as contentType with status, framed as
// every refusal is: its length, no caching, and p's Retry-After.
func (p Problem) WriteAs(w http.ResponseWriter, contentType string, status int, body []byte) error {
	hdr := w.Header()
	hdr.Set("Content-Type", contentType)
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	hdr.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		hdr.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

// With returns a copy of p with detail and route set.
func (p Problem) With(detail, route string) Problem {
	p.Detail = detail
	p.Route = route
	return p
}
