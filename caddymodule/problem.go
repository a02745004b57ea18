package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/keying"
)

// problemBase is where the problem types are documented.
const problemBase = "https://github.com/idemgate/idemgate/blob/main/docs/problems.md#"

// problem is an RFC 9457 problem detail. Titles follow the IETF
// Idempotency-Key draft where it names one.
type problem struct {
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

	retryAfter int // seconds; 0 = no Retry-After header
}

var (
	probKeyMissing  = problem{Type: problemBase + "key-missing", Title: "Idempotency-Key is missing", Status: http.StatusBadRequest}
	probKeyInvalid  = problem{Type: problemBase + "key-invalid", Title: "Idempotency-Key is invalid", Status: http.StatusBadRequest}
	probBadJSON     = problem{Type: problemBase + "malformed-body", Title: "Request body is not valid JSON", Status: http.StatusBadRequest}
	probTooDeep     = problem{Type: problemBase + "body-too-deep", Title: "Request body is nested too deeply", Status: http.StatusBadRequest}
	probBadBody     = problem{Type: problemBase + "unreadable-body", Title: "Request body could not be read", Status: http.StatusBadRequest}
	probTooLarge    = problem{Type: problemBase + "body-too-large", Title: "Request body is too large", Status: http.StatusRequestEntityTooLarge}
	probKeyReused   = problem{Type: problemBase + "key-reused", Title: "Idempotency-Key is already used", Status: http.StatusUnprocessableEntity}
	probInFlight    = problem{Type: problemBase + "in-flight", Title: "A request is outstanding for this Idempotency-Key", Status: http.StatusConflict, retryAfter: 1}
	probUnknown     = problem{Type: problemBase + "outcome-unknown", Title: "Outcome unknown: the operation is held for an operator", Status: http.StatusConflict}
	probBreakerOpen = problem{Type: problemBase + "breaker-open", Title: "The upstream is failing: new executions are paused", Status: http.StatusServiceUnavailable}
	probExhausted   = problem{Type: problemBase + "retries-exhausted", Title: "Retries exhausted: the operation is held for an operator", Status: http.StatusConflict}
	probStoreDown   = problem{Type: problemBase + "store-unavailable", Title: "Idempotency store is unavailable", Status: http.StatusServiceUnavailable, retryAfter: 2}
)

// write sends p as application/problem+json.
func (p problem) write(w http.ResponseWriter) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/problem+json")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	hdr.Set("Cache-Control", "no-store")
	if p.retryAfter > 0 {
		hdr.Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.WriteHeader(p.Status)
	_, err = w.Write(body)
	return err
}

// with returns a copy of p with detail and route set.
func (p problem) with(detail, route string) problem {
	p.Detail = detail
	p.Route = route
	return p
}

// reject answers a request whose body or key cannot be used.
func (h *Handler) reject(g *guarded, w http.ResponseWriter, err error) error {
	switch {
	case errors.Is(err, exchange.ErrTooLarge):
		return h.problem(g, w, probTooLarge.with(fmt.Sprintf("the request body exceeds %d bytes", g.rt.MaxBody), g.rt.Name))
	case errors.Is(err, keying.ErrTooDeep):
		return h.problem(g, w, probTooDeep.with(fmt.Sprintf("the request body nests arrays and objects deeper than %d levels; nothing was forwarded", keying.MaxDepth), g.rt.Name))
	case errors.Is(err, keying.ErrMalformedJSON):
		return h.problem(g, w, probBadJSON.with("route "+g.rt.Name+" reads fields of the request body, which is not valid JSON", g.rt.Name))
	default:
		return h.problem(g, w, probBadBody.with("the request body could not be read", g.rt.Name))
	}
}

func (h *Handler) problem(g *guarded, w http.ResponseWriter, p problem) error {
	g.status = p.Status
	p.Owner = g.rt.Owner
	return p.write(w)
}
