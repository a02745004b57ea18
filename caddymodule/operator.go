package caddymodule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tidwall/gjson"
	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// Operator is the one operator service behind the admin API and the
// operator console (package console): it finds records in the live
// stores, checks an operator's completion, takes the actions through the
// stores' fenced operator calls, redacts stored bodies, and maps what
// went wrong to one HTTP status. Both front ends add only their own
// transport: JSON for the admin API, forms and pages for the console.
type Operator struct {
	stores func() []LiveStore
	verify VerifyFunc
	run    RunFunc
}

// VerifyFunc runs an operator's verification check of record id in the
// live store tagged tag (see VerifyNow).
type VerifyFunc func(ctx context.Context, tag, id string, act store.Action) (*store.Record, error)

// NewOperator returns the operator service over stores (nil: the running
// config's, LiveStores) that runs checks with verify (nil: VerifyNow).
func NewOperator(stores func() []LiveStore, verify VerifyFunc) *Operator {
	if stores == nil {
		stores = LiveStores
	}
	if verify == nil {
		verify = VerifyNow
	}
	return &Operator{stores: stores, verify: verify, run: RunNow}
}

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

// Target is a record as an operator found it: the record, the live store
// that holds it, and its route in the running config (Known false when
// the route is not configured any more).
type Target struct {
	Rec   *store.Record
	Store LiveStore
	Route config.Resolved
	Known bool
}

// TTL is how long the record lives once resolved: its route's ttl.
func (t Target) TTL() time.Duration {
	if t.Known && t.Route.TTL > 0 {
		return t.Route.TTL
	}
	return store.DefaultTTL
}

// Redactor hides credentials in the record's stored body: the built-in
// names and its route's redact_fields (see routeRedactor).
func (t Target) Redactor() store.Redactor {
	if !t.Known {
		return routeRedactor(nil)
	}
	return routeRedactor(&t.Route)
}

// routeRedactor is the redaction of the stored bodies of route rt's
// records: the built-in credential names and its redact_fields, and its
// show_unparsed_bodies. A record whose route is not configured (nil) gets
// the built-in names, and bodies that cannot be redacted field by field
// only as size and digest.
func routeRedactor(rt *config.Resolved) store.Redactor {
	if rt == nil {
		return store.NewRedactor(nil)
	}
	return store.NewRedactor(rt.RedactFields).WithUnparsed(rt.ShowUnparsedBodies)
}

// Find looks record id up in every live store; the first that has it
// wins. Errors: store.ErrInvalidID (not a record id), store.ErrNotFound,
// or the failure of a store when none has the record.
func (o *Operator) Find(ctx context.Context, id string) (Target, error) {
	if !validRecordID(id) {
		return Target{}, fmt.Errorf("%w: %q is not a record id (32 lowercase hex characters)", store.ErrInvalidID, id)
	}
	live := o.stores()
	rec, i, err := FirstHolding(ctx, id, len(live), func(i int) RecordStore { return live[i].Store })
	switch {
	case rec != nil:
		rt, known := live[i].Routes[rec.Route]
		return Target{Rec: rec, Store: live[i], Route: rt, Known: known}, nil
	case err != nil:
		return Target{}, err
	}
	return Target{}, fmt.Errorf("%w: record %s", store.ErrNotFound, id)
}

// Release releases the record on act's word: the next retry executes.
// With a store.ErrConflict (a live call, or a verification check holding
// the record: store.ErrCheckRunning) the record is returned as it is.
func (o *Operator) Release(ctx context.Context, t Target, act store.Action) (*store.Record, error) {
	return t.Store.Store.OperatorRelease(ctx, t.Rec.ID, act, t.TTL())
}

// Complete checks c against the record's route and records it as the
// operation's outcome on act's word: retries replay it. It returns the
// record after it and the result stored.
func (o *Operator) Complete(ctx context.Context, t Target, c Completion, act store.Action) (*store.Record, store.Result, error) {
	res, err := c.Result(t)
	if err != nil {
		return nil, res, err
	}
	rec, err := t.Store.Store.OperatorComplete(ctx, t.Rec.ID, res, act, t.TTL())
	return rec, res, err
}

// Verify runs one verification check of the held record now, on act's
// word, with its route's verify rule in the running config.
func (o *Operator) Verify(ctx context.Context, t Target, act store.Action) (*store.Record, error) {
	return o.verify(ctx, t.Store.Tag, t.Rec.ID, act)
}

// VerifyNow runs one verification check of held record id, in the live
// store tagged tag (LiveStore.Tag), on the word of act, with the verify
// rule of the running config for the record's route, and returns the
// record after it (see POST /idempotency/records/{id}/verify). The check
// and act are kept on the record. Errors: store.ErrNotFound,
// store.ErrConflict (not held, no check, a check running, resolved
// meanwhile), ErrNoVerify, store.ErrInvalidArgument (act), or the
// store's failure.
func VerifyNow(ctx context.Context, tag, id string, act store.Action) (*store.Record, error) {
	return stores.verifyNow(ctx, tag, id, act)
}

// operatorCheck runs an operator's check of rec, found in store s, with
// the live verifier of the record's route, and returns the record after
// it and the verdict (see Verifier.Verify). ErrNoVerify when the route
// has no verify rule in the running config.
func operatorCheck(s liveStore, rec *store.Record, act store.Action) (*store.Record, string, error) {
	if err := verifiable(rec); err != nil {
		return rec, "", err
	}
	rt := s.routes[rec.Route]
	var v *Verifier
	if rt != nil && rt.Verify != nil {
		v = rt.verifier.Load()
	}
	if v == nil {
		return rec, "", fmt.Errorf("%w: route %s", ErrNoVerify, rec.Route)
	}
	return v.Verify(rt, rec, act)
}

// verifyNow is VerifyNow over o's stores.
func (o *storeOwner) verifyNow(ctx context.Context, tag, id string, act store.Action) (*store.Record, error) {
	for _, s := range o.live() {
		if s.tag != tag {
			continue
		}
		rec, err := s.store.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			return nil, fmt.Errorf("%w: %s", store.ErrNotFound, id)
		}
		rec, _, err = operatorCheck(s, rec, act)
		return rec, err
	}
	return nil, fmt.Errorf("%w: the store of record %s is no longer in use", store.ErrNotFound, id)
}

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

// InvalidError is an operator request that the service refuses before
// any store sees it. It is a store.ErrInvalidArgument.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

// Unwrap makes an InvalidError a store.ErrInvalidArgument.
func (e *InvalidError) Unwrap() error { return store.ErrInvalidArgument }

func invalid(format string, args ...any) error {
	return &InvalidError{msg: fmt.Sprintf(format, args...)}
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
		return res, invalid("status %d is not a final HTTP status (200 to 599)", c.Status)
	}
	res.Status, res.Body = c.Status, c.Body
	limit := int64(DefaultMaxCompletionBody)
	if t.Known && t.Route.MaxResponse > 0 {
		limit = t.Route.MaxResponse
	}
	switch {
	case int64(len(res.Body)) > limit:
		return res, invalid("the body is larger than the route's max_response (%d bytes)", limit)
	case len(res.Body) > 0 && (c.Status == http.StatusNoContent || c.Status == http.StatusNotModified):
		return res, invalid("status %d has no body", c.Status)
	}
	res.Header = http.Header{}
	for name, values := range c.Header {
		if !httpguts.ValidHeaderFieldName(name) {
			return res, invalid("header name %q is not valid", name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return res, invalid("header %s: value %q is not valid (control characters)", name, v)
			}
		}
		key := http.CanonicalHeaderKey(name)
		res.Header[key] = append(res.Header[key], values...)
	}
	if ct := res.Header["Content-Type"]; len(ct) > 1 || len(ct) == 1 && len(ct[0]) > MaxContentType {
		return res, invalid("the content type must be one header value of at most %d bytes", MaxContentType)
	}
	res.Header = storableHeader(res.Header)
	sum := sha256.Sum256(res.Body)
	res.Digest = hex.EncodeToString(sum[:])
	switch {
	case c.ExternalID != nil:
		if !store.ValidExternalID(*c.ExternalID) {
			return res, invalid("the external id must be at most %d bytes, without control characters", store.MaxExternalID)
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

// OperatorStatus is the one mapping of what went wrong with an operator
// request to its HTTP status, for the admin API and the console: 404 for
// a record that does not exist, 409 for one whose state refuses the
// action (a live call, a verification check holding it, no verify rule),
// 400 for a request the service or a store refuses, 503 when a store
// failed; 200 for no error.
func OperatorStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrConflict), errors.Is(err, ErrNoVerify):
		return http.StatusConflict
	case errors.Is(err, store.ErrInvalidID), errors.Is(err, store.ErrInvalidArgument):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}
