package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/store"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// adminBase is the path prefix of the operator endpoints on Caddy's admin
// endpoint.
const adminBase = "/idempotency/"

// Limits of the operator endpoints.
const (
	adminDefaultLimit = 100
	adminMaxLimit     = 1000
	// adminMaxRequest bounds the JSON body of a complete request (the
	// response body it carries, possibly base64-encoded, plus headers).
	adminMaxRequest = 16 << 20
	// adminMaxExternalID is the longest external id stored, as for ids
	// taken from upstream responses.
	adminMaxExternalID = 255
)

// AdminAPI is the operator API on Caddy's admin endpoint (module
// admin.api.idempotency). It lists, shows and resolves the idempotency
// records of every record store that a loaded config's idempotency
// handlers use:
//
//	GET  /idempotency/records?state=&route=&limit=&cursor=
//	GET  /idempotency/records/{id}
//	POST /idempotency/records/{id}/release    {"reason": "..."} (or no body)
//	POST /idempotency/records/{id}/complete   {"status": 201, ..., "reason": "..."}
//
// Resolutions are kept on the record as audit entries (actor "admin-api")
// and logged.
//
//	POST /idempotency/records/{id}/verify     {"reason": "..."} (or no body)
//
// Caddy loads every admin.api module for its admin endpoint on each config
// load, before the config's apps, so the module finds the stores at request
// time in a registry that the handlers fill when they are provisioned and
// empty when they are cleaned up. Responses never carry request data:
// records hold no key, no scope input and no request body; the single
// record view shows the stored response only, its credential headers
// redacted. The POST endpoints accept only application/json bodies (415
// otherwise), so a cross-site form cannot reach them.
type AdminAPI struct {
	logger *zap.Logger
	stores *storeOwner // nil: the process's stores
}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.idempotency",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Provision sets up the module's logger.
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger(a)
	return nil
}

// Routes returns the admin routes of the operator API.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: adminBase, Handler: caddy.AdminHandlerFunc(a.serve)}}
}

func (a *AdminAPI) owner() *storeOwner {
	if a.stores != nil {
		return a.stores
	}
	return stores
}

func (a *AdminAPI) log() *zap.Logger {
	if a.logger != nil {
		return a.logger
	}
	return zap.NewNop()
}

// serve routes a request under /idempotency/.
func (a *AdminAPI) serve(w http.ResponseWriter, r *http.Request) error {
	rest, ok := strings.CutPrefix(r.URL.Path, adminBase+"records")
	if !ok || (rest != "" && rest[0] != '/') {
		return apiError(http.StatusNotFound, "resource not found: %s", r.URL.Path)
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	switch {
	case rest == "" || rest == "/":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		return a.list(w, r)
	case len(parts) == 1:
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		return a.get(w, r, parts[0])
	case len(parts) == 2 && parts[1] == "release":
		if err := allow(r, http.MethodPost); err != nil {
			return err
		}
		if ok, err := requireJSON(w, r); !ok {
			return err
		}
		return a.release(w, r, parts[0])
	case len(parts) == 2 && parts[1] == "verify":
		if err := allow(r, http.MethodPost); err != nil {
			return err
		}
		if ok, err := requireJSON(w, r); !ok {
			return err
		}
		return a.verify(w, r, parts[0])
	case len(parts) == 2 && parts[1] == "complete":
		if err := allow(r, http.MethodPost); err != nil {
			return err
		}
		if ok, err := requireJSON(w, r); !ok {
			return err
		}
		return a.complete(w, r, parts[0])
	}
	return apiError(http.StatusNotFound, "resource not found: %s", r.URL.Path)
}

func allow(r *http.Request, method string) error {
	if r.Method == method {
		return nil
	}
	return apiError(http.StatusMethodNotAllowed, "method %s not allowed; use %s", r.Method, method)
}

func apiError(status int, format string, args ...any) error {
	return caddy.APIError{HTTPStatus: status, Err: fmt.Errorf(format, args...)}
}

// recordSummary is a record as listed: no body, no headers, and nothing
// from the request (no key, scope or fingerprint).
type recordSummary struct {
	ID          string      `json:"id"`
	Route       string      `json:"route"`
	Operation   string      `json:"operation"`
	State       store.State `json:"state"`
	Attempts    int64       `json:"attempts"`
	Executions  int64       `json:"executions"`
	StartedAt   time.Time   `json:"started_at,omitzero"`
	CompletedAt time.Time   `json:"completed_at,omitzero"`
	LeaseUntil  time.Time   `json:"lease_until,omitzero"` // in flight only
	Status      int         `json:"status,omitempty"`
	ExternalID  string      `json:"external_id,omitempty"`
	Digest      string      `json:"digest,omitempty"`
	Reason      string      `json:"reason,omitempty"`
	BodyOmitted bool        `json:"body_omitted,omitempty"`
}

// recordView is one record in full: the summary plus the stored response's
// headers, credentials redacted (store.RedactHeader), and body ("body"
// when it is valid UTF-8, else "body_base64"), and the operator actions
// taken on it.
type recordView struct {
	recordSummary
	Headers    http.Header  `json:"headers,omitempty"`
	Body       *string      `json:"body,omitempty"`
	BodyBase64 string       `json:"body_base64,omitempty"`
	Audit      []auditEntry `json:"audit,omitempty"`
	// Verification lists the checks of the record's outcome and the next
	// one, for a record whose route has a verify rule.
	Verification *verificationView `json:"verification,omitempty"`
}

// auditEntry is one operator action on a record, oldest first.
type auditEntry struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Reason string    `json:"reason,omitempty"`
}

// adminActor is who the audit trail names for actions taken through the
// admin API, which has no users of its own.
const adminActor = "admin-api"

// recordList is the answer to a list request.
type recordList struct {
	Records []recordSummary `json:"records"`
	// NextCursor continues the listing; "" at the end.
	NextCursor string `json:"next_cursor"`
}

func summarize(rec *store.Record) recordSummary {
	sum := recordSummary{
		ID:          rec.ID,
		Route:       rec.Route,
		Operation:   rec.Operation,
		State:       rec.State,
		Attempts:    rec.Attempts,
		Executions:  rec.Executions,
		StartedAt:   rec.StartedAt.UTC(),
		CompletedAt: rec.CompletedAt.UTC(),
		Status:      rec.Status,
		ExternalID:  rec.ExternalID,
		Digest:      rec.Digest,
		Reason:      rec.Reason,
		BodyOmitted: rec.BodyOmitted,
	}
	if rec.State == store.StateInFlight {
		// A lease means something only while the call runs.
		sum.LeaseUntil = rec.LeaseUntil.UTC()
	}
	return sum
}

func view(rec *store.Record) recordView {
	v := recordView{recordSummary: summarize(rec), Headers: store.RedactHeader(rec.Header), Verification: verification(rec)}
	for _, a := range rec.Audit {
		v.Audit = append(v.Audit, auditEntry{At: a.At.UTC(), Actor: a.Actor, Action: a.Action, Reason: a.Reason})
	}
	switch {
	case len(rec.Body) == 0:
	case utf8.Valid(rec.Body):
		s := string(rec.Body)
		v.Body = &s
	default:
		v.BodyBase64 = base64.StdEncoding.EncodeToString(rec.Body)
	}
	return v
}

func writeJSON(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return apiError(http.StatusInternalServerError, "encoding the response: %v", err)
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Content-Length", strconv.Itoa(len(b)+1))
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(append(b, '\n'))
	return err
}

// storeError turns a store failure into an API error.
func storeError(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return apiError(http.StatusNotFound, "%v", err)
	case errors.Is(err, store.ErrConflict):
		return apiError(http.StatusConflict, "%v", err)
	case errors.Is(err, store.ErrInvalidID), errors.Is(err, store.ErrInvalidArgument):
		return apiError(http.StatusBadRequest, "%v", err)
	}
	return apiError(http.StatusServiceUnavailable, "record store: %v", err)
}

// list answers GET /idempotency/records: the records of every live store,
// store after store, filtered by state and route, limit at a time.
func (a *AdminAPI) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.ListFilter{Route: q.Get("route"), Limit: adminDefaultLimit}
	if s := q.Get("state"); s != "" {
		st := store.State(s)
		if !slices.Contains(adminStates, st) {
			return apiError(http.StatusBadRequest, "state %q is not one of %s", s, joinStates(adminStates))
		}
		f.State = st
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > adminMaxLimit {
			return apiError(http.StatusBadRequest, "limit %q is not a number from 1 to %d", s, adminMaxLimit)
		}
		f.Limit = n
	}
	stores := a.owner().live()
	start := 0
	if c := q.Get("cursor"); c != "" {
		tag, inner, ok := strings.Cut(c, ".")
		i := slices.IndexFunc(stores, func(s liveStore) bool { return s.tag == tag })
		if !ok || i < 0 {
			return apiError(http.StatusBadRequest, "cursor %q is not valid (or the configuration changed since): list again without a cursor", c)
		}
		start, f.Cursor = i, inner
	}
	out := recordList{Records: []recordSummary{}}
	want := f.Limit
	for i := start; i < len(stores); i++ {
		f.Limit = want - len(out.Records)
		page, err := stores[i].store.List(r.Context(), f)
		if err != nil {
			return storeError(err)
		}
		for _, rec := range page.Records {
			out.Records = append(out.Records, summarize(rec))
		}
		if page.NextCursor != "" {
			out.NextCursor = stores[i].tag + "." + page.NextCursor
			break
		}
		f.Cursor = ""
		if len(out.Records) >= want {
			if i+1 < len(stores) {
				out.NextCursor = stores[i+1].tag + "."
			}
			break
		}
	}
	return writeJSON(w, out)
}

// adminStates are the states a listing may filter by.
var adminStates = []store.State{store.StateInFlight, store.StateCompleted, store.StateUnknown, store.StateReleased}

func joinStates(states []store.State) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// find looks the record up in every live store; the first that has it
// wins.
func (a *AdminAPI) find(ctx context.Context, id string) (*store.Record, liveStore, error) {
	if !validRecordID(id) {
		return nil, liveStore{}, apiError(http.StatusBadRequest, "%q is not a record id (32 lowercase hex characters)", id)
	}
	live := a.owner().live()
	rec, i, err := FirstHolding(ctx, id, len(live), func(i int) RecordStore { return live[i].store })
	switch {
	case rec != nil:
		return rec, live[i], nil
	case err != nil:
		return nil, liveStore{}, storeError(err)
	}
	return nil, liveStore{}, apiError(http.StatusNotFound, "record %s not found", id)
}

// validRecordID accepts what keying.KeyID makes: 32 lowercase hex
// characters.
func validRecordID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// get answers GET /idempotency/records/{id}.
func (a *AdminAPI) get(w http.ResponseWriter, r *http.Request, id string) error {
	rec, _, err := a.find(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, view(rec))
}

// releaseRequest is the body of POST /idempotency/records/{id}/release,
// which may also be empty.
type releaseRequest struct {
	// Reason is kept on the record's audit trail.
	Reason string `json:"reason"`
}

// decodeBody decodes r's JSON body into v: one JSON value, no unknown
// fields. An empty body leaves v as it is when emptyOK.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, adminMaxRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if emptyOK && err == io.EOF {
			return nil
		}
		return apiError(http.StatusBadRequest, "request body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return apiError(http.StatusBadRequest, "request body: more than one JSON value")
	}
	return nil
}

// release answers POST /idempotency/records/{id}/release: the record turns
// released and the next retry executes.
func (a *AdminAPI) release(w http.ResponseWriter, r *http.Request, id string) error {
	var req releaseRequest
	if err := decodeBody(w, r, &req, true); err != nil {
		return err
	}
	found, s, err := a.find(r.Context(), id)
	if err != nil {
		return err
	}
	act := store.Action{Actor: adminActor, Reason: req.Reason}
	rec, err := s.store.OperatorRelease(r.Context(), id, act, s.ttl(found.Route))
	if err != nil {
		return storeError(err)
	}
	a.log().Info("record released by an operator",
		zap.String("route", rec.Route), zap.String("key_id", id), zap.String("actor", act.Actor),
		zap.String("previous_state", string(found.State)), zap.Int64("executions", rec.Executions))
	return writeJSON(w, view(rec))
}

// completeRequest is the body of POST /idempotency/records/{id}/complete:
// the verified outcome that retries replay from now on.
type completeRequest struct {
	Status     int                     `json:"status"`
	Headers    map[string]headerValues `json:"headers"`
	Body       *string                 `json:"body"`
	BodyBase64 *string                 `json:"body_base64"`
	ExternalID *string                 `json:"external_id"`
	// Reason is kept on the record's audit trail.
	Reason string `json:"reason"`
}

// headerValues accepts a header's values as a JSON array of strings or as
// one string.
type headerValues []string

// UnmarshalJSON decodes a string or an array of strings.
func (v *headerValues) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*v = headerValues{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("header values must be a string or an array of strings")
	}
	*v = many
	return nil
}

// result checks the request and turns it into the result to store. route
// (nil when the record's route is not configured any more) supplies the
// external id path when the request names no external id.
func (c completeRequest) result(rt *route) (store.Result, error) {
	var res store.Result
	if c.Status < 200 || c.Status > 599 {
		return res, fmt.Errorf("status %d is not a final HTTP status (200 to 599)", c.Status)
	}
	res.Status = c.Status
	switch {
	case c.Body != nil && c.BodyBase64 != nil:
		return res, errors.New("give body or body_base64, not both")
	case c.Body != nil:
		res.Body = []byte(*c.Body)
	case c.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*c.BodyBase64)
		if err != nil {
			return res, fmt.Errorf("body_base64: %v", err)
		}
		res.Body = b
	}
	if len(res.Body) > 0 && (c.Status == http.StatusNoContent || c.Status == http.StatusNotModified) {
		return res, fmt.Errorf("status %d has no body", c.Status)
	}
	res.Header = http.Header{}
	for name, values := range c.Headers {
		if !httpguts.ValidHeaderFieldName(name) {
			return res, fmt.Errorf("header name %q is not valid", name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return res, fmt.Errorf("header %s: value %q is not valid (control characters)", name, v)
			}
		}
		key := http.CanonicalHeaderKey(name)
		res.Header[key] = append(res.Header[key], values...)
	}
	// The replaying server sets these itself; hop-by-hop headers are never
	// replayed.
	res.Header = storableHeader(res.Header)
	sum := sha256.Sum256(res.Body)
	res.Digest = hex.EncodeToString(sum[:])
	switch {
	case c.ExternalID != nil:
		res.ExternalID = *c.ExternalID
	case rt != nil && rt.ExternalID != "" && len(res.Body) > 0:
		if v := gjson.GetBytes(res.Body, rt.ExternalID); v.Exists() {
			res.ExternalID = v.String()
		}
	}
	if len(res.ExternalID) > adminMaxExternalID {
		return res, fmt.Errorf("external_id is longer than %d bytes", adminMaxExternalID)
	}
	return res, nil
}

// complete answers POST /idempotency/records/{id}/complete: the record
// turns completed with the operator's verified outcome, which retries
// replay.
func (a *AdminAPI) complete(w http.ResponseWriter, r *http.Request, id string) error {
	var req completeRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		return err
	}
	found, s, err := a.find(r.Context(), id)
	if err != nil {
		return err
	}
	res, err := req.result(s.routes[found.Route])
	if err != nil {
		return apiError(http.StatusBadRequest, "%v", err)
	}
	act := store.Action{Actor: adminActor, Reason: req.Reason}
	rec, err := s.store.OperatorComplete(r.Context(), id, res, act, s.ttl(found.Route))
	if err != nil {
		return storeError(err)
	}
	a.log().Info("record completed by an operator",
		zap.String("route", rec.Route), zap.String("key_id", id), zap.String("actor", act.Actor),
		zap.String("previous_state", string(found.State)), zap.Int("status", res.Status))
	return writeJSON(w, view(rec))
}

// Interface guards
var (
	_ caddy.Provisioner = (*AdminAPI)(nil)
	_ caddy.AdminRouter = (*AdminAPI)(nil)
)
