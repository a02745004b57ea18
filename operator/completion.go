package operator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"

	"github.com/tidwall/gjson"
	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/store"
)

// Limits of operator actions, the same through every front end (an
// external id is at most store.MaxExternalID bytes, a reason at most
// store.MaxReasonLen).
const (
	// DefaultMaxCompletionBody bounds a completion's body when the
	// record's route is not in the running config any more (else its
	// max_response does); the default max_response.
	DefaultMaxCompletionBody = 1 << 20
	// MaxContentType bounds a completion's Content-Type.
	MaxContentType = 256
)

// Completion is an operator's verified outcome of a record's operation,
// as the admin API and the console take it.
type Completion struct {
	Status int
	Header http.Header
	Body   []byte
	// ExternalID is the operation's id upstream; nil: read from a JSON
	// body at the route's external_id path, as for upstream answers.
	ExternalID *string
}

// Result checks the completion by the rules every front end applies and
// turns it into the result to store: a final status (200 to 599); a body
// within the route's max_response (DefaultMaxCompletionBody when the route
// is gone) and none with 204 or 304; valid header names and values, one
// Content-Type of at most MaxContentType bytes, the headers a replaying
// server sets itself dropped; an external id of at most
// store.MaxExternalID bytes without control characters. Errors are
// InvalidErrors.
func (c Completion) Result(t Target) (store.Result, error) {
	var res store.Result
	if c.Status < 200 || c.Status > 599 {
		return res, Invalid("status %d is not a final HTTP status (200 to 599)", c.Status)
	}
	res.Status, res.Body = c.Status, c.Body
	limit := int64(DefaultMaxCompletionBody)
	if t.Known && t.Route.MaxResponse > 0 {
		limit = t.Route.MaxResponse
	}
	switch {
	case int64(len(res.Body)) > limit:
		return res, Invalid("the body is larger than the route's max_response (%d bytes)", limit)
	case len(res.Body) > 0 && (c.Status == http.StatusNoContent || c.Status == http.StatusNotModified):
		return res, Invalid("status %d has no body", c.Status)
	}
	res.Header = http.Header{}
	for name, values := range c.Header {
		if !httpguts.ValidHeaderFieldName(name) {
			return res, Invalid("header name %q is not valid", name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return res, Invalid("header %s: value %q is not valid (control characters)", name, v)
			}
		}
		key := http.CanonicalHeaderKey(name)
		res.Header[key] = append(res.Header[key], values...)
	}
	if ct := res.Header["Content-Type"]; len(ct) > 1 || len(ct) == 1 && len(ct[0]) > MaxContentType {
		return res, Invalid("the content type must be one header value of at most %d bytes", MaxContentType)
	}
	res.Header = store.StorableHeader(res.Header)
	sum := sha256.Sum256(res.Body)
	res.Digest = hex.EncodeToString(sum[:])
	switch {
	case c.ExternalID != nil:
		if !store.ValidExternalID(*c.ExternalID) {
			return res, Invalid("the external id must be at most %d bytes, without control characters", store.MaxExternalID)
		}
		res.ExternalID = *c.ExternalID
	case t.Known && t.Route.ExternalID != "" && len(res.Body) > 0:
		if body := bytes.TrimPrefix(res.Body, []byte("\xef\xbb\xbf")); json.Valid(body) {
			if v := gjson.GetBytes(body, t.Route.ExternalID); v.Exists() && store.ValidExternalID(v.String()) {
				res.ExternalID = v.String()
			}
		}
	}
	return res, nil
}
