package adminapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/storepool"
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
// and logged. The actions, their checks, the redaction of stored bodies
// and the statuses of errors are the operator service's (Operator), the
// same as the console's.
//
//	POST /idempotency/records/{id}/verify     {"reason": "..."} (or no body)
//	POST /idempotency/records/{id}/run        {"reason": "..."} (required)
//
// Caddy loads every admin.api module for its admin endpoint on each config
// load, before the config's apps, so the module finds the stores at request
// time in a registry that the handlers fill when they are provisioned and
// empty when they are cleaned up. Responses never carry request data:
// records hold no key, no scope input and no request body; the single
// record view shows the stored response only, its credential headers
// and the credential-like fields of its body redacted. The POST endpoints
// accept only application/json bodies (415 otherwise), so a cross-site
// form cannot reach them.
type AdminAPI struct {
	logger *zap.Logger
	stores func() []operator.LiveStore // nil: the running config's (storepool.LiveStores)
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

// operator is the operator service over this API's stores.
func (a *AdminAPI) operator() *operator.Service {
	if a.stores != nil {
		return operator.New(a.stores)
	}
	return operator.New(storepool.LiveStores)
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
	case len(parts) == 2 && parts[1] == "run":
		if err := allow(r, http.MethodPost); err != nil {
			return err
		}
		if ok, err := requireJSON(w, r); !ok {
			return err
		}
		return a.run(w, r, parts[0])
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
	// Tool is the tool an agent called, for a record of a route guarding
	// an MCP server (protocol: mcp).
	Tool string `json:"tool,omitempty"`
	// Owner is who resolves the route's held operations (its owner).
	Owner string `json:"owner,omitempty"`
}

// recordView is one record in full: the summary plus the stored response's
// headers, credentials redacted (operator.RedactHeader), and body (JSON,
// NDJSON and URL-encoded forms as "body" with their credential-like
// fields redacted by the route's operator.Redactor; anything else as
// "body_unparsed", its size and digest, or, on a route with
// show_unparsed_bodies, as "body" when it is valid UTF-8 and else
// "body_base64"), and the operator actions taken on it.
type recordView struct {
	recordSummary
	Headers    http.Header `json:"headers,omitempty"`
	Body       *string     `json:"body,omitempty"`
	BodyBase64 string      `json:"body_base64,omitempty"`
	// BodyUnparsed stands for a body that cannot be redacted field by
	// field (XML, multipart, other text, bytes): "412 bytes, sha256 …".
	BodyUnparsed string `json:"body_unparsed,omitempty"`
	// BodyRedactions counts the values of the body replaced by
	// "[redacted]".
	BodyRedactions int `json:"body_redactions,omitempty"`
	// Arguments are the tool call's arguments (with "tool"), as JSON
	// text on one line, their credential-like fields and the route's
	// redact_fields "[redacted]" (they were redacted before they were
	// stored); arguments past 4 KiB are cut, with a marker.
	Arguments *string      `json:"arguments,omitempty"`
	Audit     []auditEntry `json:"audit,omitempty"`
	// Verification lists the checks of the record's outcome and the next
	// one, for a record whose route has a verify rule.
	Verification *verificationView `json:"verification,omitempty"`
	// Retries is the retry budget used and what each "not done"
	// execution answered, and whether a re-drive is possible.
	Retries *retriesView `json:"retries,omitempty"`
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
		State:       rec.Class(),
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
	if rec.Call != nil {
		sum.Tool = rec.Call.Tool
	}
	if rec.State == store.StateInFlight {
		// A lease means something only while the call runs.
		sum.LeaseUntil = rec.LeaseUntil.UTC()
	}
	return sum
}

// view is rec in full, its body redacted by red.
func view(rec *store.Record, red operator.Redactor) recordView {
	v := recordView{recordSummary: summarize(rec), Headers: operator.RedactHeader(rec.Header), Verification: verification(rec), Retries: retries(rec)}
	for _, a := range rec.Audit {
		v.Audit = append(v.Audit, auditEntry{At: a.At.UTC(), Actor: a.Actor, Action: a.Action, Reason: a.Reason})
	}
	if rec.Call != nil && rec.Call.Arguments != "" {
		args := red.ToolArguments(rec.Call, "")
		v.Arguments = &args
	}
	switch shown := red.Body(rec.Body, rec.Header.Get("Content-Type"), ""); shown.Kind {
	case operator.BodyEmpty:
	case operator.BodyBinary:
		v.BodyBase64 = base64.StdEncoding.EncodeToString(rec.Body)
	case operator.BodyUnparsed:
		v.BodyUnparsed = shown.Text
	default:
		v.Body, v.BodyRedactions = &shown.Text, shown.Redactions
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

// storeError turns what went wrong with an operator request into an API
// error, with the operator service's status (operator.Status).
func storeError(err error) error {
	status := operator.Status(err)
	if status == http.StatusServiceUnavailable {
		return apiError(status, "record store: %v", err)
	}
	return apiError(status, "%v", err)
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
	// Records held because their retries were used up are kept as held
	// records (outcome_unknown): listed from those, the others left out.
	exhaustedOnly := f.State == store.StateExhausted
	if exhaustedOnly {
		f.State = store.StateUnknown
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > adminMaxLimit {
			return apiError(http.StatusBadRequest, "limit %q is not a number from 1 to %d", s, adminMaxLimit)
		}
		f.Limit = n
	}
	stores := a.operator().Stores()
	start := 0
	if c := q.Get("cursor"); c != "" {
		tag, inner, ok := strings.Cut(c, ".")
		i := slices.IndexFunc(stores, func(s operator.LiveStore) bool { return s.Tag == tag })
		if !ok || i < 0 {
			return apiError(http.StatusBadRequest, "cursor %q is not valid (or the configuration changed since): list again without a cursor", c)
		}
		start, f.Cursor = i, inner
	}
	out := recordList{Records: []recordSummary{}}
	want := f.Limit
	for i := start; i < len(stores); i++ {
		f.Limit = want - len(out.Records)
		page, err := stores[i].Store.List(r.Context(), f)
		if err != nil {
			return storeError(err)
		}
		for _, rec := range page.Records {
			if exhaustedOnly && rec.Class() != store.StateExhausted {
				continue
			}
			sum := summarize(rec)
			sum.Owner = stores[i].Routes[rec.Route].Owner
			out.Records = append(out.Records, sum)
		}
		if page.NextCursor != "" {
			out.NextCursor = stores[i].Tag + "." + page.NextCursor
			break
		}
		f.Cursor = ""
		if len(out.Records) >= want {
			if i+1 < len(stores) {
				out.NextCursor = stores[i+1].Tag + "."
			}
			break
		}
	}
	return writeJSON(w, out)
}

// adminStates are the states a listing may filter by.
var adminStates = []store.State{store.StateInFlight, store.StateCompleted, store.StateUnknown, store.StateExhausted, store.StateReleased}

func joinStates(states []store.State) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// get answers GET /idempotency/records/{id}.
func (a *AdminAPI) get(w http.ResponseWriter, r *http.Request, id string) error {
	t, err := a.operator().Find(r.Context(), id)
	if err != nil {
		return storeError(err)
	}
	v := view(t.Rec, t.Redactor())
	v.Owner = t.Route.Owner
	return writeJSON(w, v)
}

// releaseRequest is the body of POST /idempotency/records/{id}/release
// (which may also be empty) and of .../run.
type releaseRequest struct {
	// Reason is kept on the record's audit trail.
	Reason string `json:"reason"`
}

// actionOn reads an action's {"reason": "…"} body (empty allowed when
// emptyOK), finds record id and returns the operator service, the record
// and the admin API's action.
func (a *AdminAPI) actionOn(w http.ResponseWriter, r *http.Request, id string, emptyOK bool) (*operator.Service, operator.Target, store.Action, error) {
	var req releaseRequest
	if err := decodeBody(w, r, &req, emptyOK); err != nil {
		return nil, operator.Target{}, store.Action{}, err
	}
	op := a.operator()
	t, err := op.Find(r.Context(), id)
	if err != nil {
		return nil, operator.Target{}, store.Action{}, storeError(err)
	}
	return op, t, store.Action{Actor: adminActor, Reason: req.Reason}, nil
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
	op, t, act, err := a.actionOn(w, r, id, true)
	if err != nil {
		return err
	}
	rec, err := op.Release(r.Context(), t, act)
	if err != nil {
		return storeError(err)
	}
	a.log().Info("record released by an operator",
		zap.String("route", rec.Route), zap.String("record_id", id), zap.String("actor", act.Actor),
		zap.String("previous_state", string(t.Rec.State)), zap.Int64("executions", rec.Executions))
	return writeJSON(w, view(rec, t.Redactor()))
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

// completion turns the request into the operator service's Completion.
func (c completeRequest) completion() (operator.Completion, error) {
	comp := operator.Completion{Status: c.Status, ExternalID: c.ExternalID, Header: http.Header{}}
	switch {
	case c.Body != nil && c.BodyBase64 != nil:
		return comp, operator.Invalid("give body or body_base64, not both")
	case c.Body != nil:
		comp.Body = []byte(*c.Body)
	case c.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*c.BodyBase64)
		if err != nil {
			return comp, operator.Invalid("body_base64: %v", err)
		}
		comp.Body = b
	}
	for name, values := range c.Headers {
		comp.Header[name] = values
	}
	return comp, nil
}

// complete answers POST /idempotency/records/{id}/complete: the record
// turns completed with the operator's verified outcome, which retries
// replay.
func (a *AdminAPI) complete(w http.ResponseWriter, r *http.Request, id string) error {
	var req completeRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		return err
	}
	comp, err := req.completion()
	if err != nil {
		return storeError(err)
	}
	op := a.operator()
	t, err := op.Find(r.Context(), id)
	if err != nil {
		return storeError(err)
	}
	act := store.Action{Actor: adminActor, Reason: req.Reason}
	rec, res, err := op.Complete(r.Context(), t, comp, act)
	if err != nil {
		return storeError(err)
	}
	a.log().Info("record completed by an operator",
		zap.String("route", rec.Route), zap.String("record_id", id), zap.String("actor", act.Actor),
		zap.String("previous_state", string(t.Rec.State)), zap.Int("status", res.Status))
	return writeJSON(w, view(rec, t.Redactor()))
}

// Interface guards
var (
	_ caddy.Provisioner = (*AdminAPI)(nil)
	_ caddy.AdminRouter = (*AdminAPI)(nil)
)

// verify answers POST /idempotency/records/{id}/verify: one check of a
// held record, now, with the rule of the running config; the answer is
// the record after it.
func (a *AdminAPI) verify(w http.ResponseWriter, r *http.Request, id string) error {
	op, t, act, err := a.actionOn(w, r, id, true)
	if err != nil {
		return err
	}
	rec, verdict, err := op.CheckOutcome(r.Context(), t, act)
	if err != nil {
		return storeError(err)
	}
	a.log().Info("record verified by an operator",
		zap.String("route", rec.Route), zap.String("record_id", id), zap.String("actor", act.Actor),
		zap.String("verdict", verdict), zap.String("state", string(rec.State)))
	return writeJSON(w, view(rec, t.Redactor()))
}

// verificationView is what the record view shows of a record's
// verification: the check (its URL may hold the key, never a header),
// the checks made, and the next one.
type verificationView struct {
	Method string `json:"method,omitempty"`
	URL    string `json:"url,omitempty"`
	// Match: the values the answer must hold, by JSON path.
	Match          map[string]string `json:"match,omitempty"`
	Checks         []checkView       `json:"checks"`
	CheckCount     int64             `json:"check_count"`
	NextCheck      time.Time         `json:"next_check,omitzero"`
	NotFoundStreak int64             `json:"not_found_streak,omitempty"`
	Running        bool              `json:"running,omitempty"`
}

// checkView is one check on the record view.
type checkView struct {
	At      time.Time `json:"at"`
	Status  int       `json:"status,omitempty"`
	Verdict string    `json:"verdict"`
}

// verification is the record view's verification part; nil for a record
// without a check.
func verification(rec *store.Record) *verificationView {
	if rec.Check.IsZero() && len(rec.Checks) == 0 {
		return nil
	}
	v := &verificationView{
		Method: rec.Check.Method, URL: rec.Check.URL,
		Checks:     make([]checkView, 0, len(rec.Checks)),
		CheckCount: rec.CheckCount, NotFoundStreak: rec.NotFoundStreak,
	}
	for _, m := range rec.Check.Match {
		if v.Match == nil {
			v.Match = make(map[string]string, len(rec.Check.Match))
		}
		v.Match[m.Path] = m.Value
	}
	for _, c := range rec.Checks {
		v.Checks = append(v.Checks, checkView{At: c.At.UTC(), Status: c.Status, Verdict: c.Verdict})
	}
	if rec.State == store.StateUnknown {
		v.NextCheck = rec.NextCheck.UTC()
		v.Running = rec.CheckLeaseUntil.After(time.Now())
	}
	return v
}
