package console

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
)

// event is one line of a record's timeline.
type event struct {
	At     time.Time // zero: now, without a time of its own
	Kind   string    // CSS class: start, lease, done, held, operator
	Title  string
	Detail string
}

// recordPage is the data of a record's page (and of the confirmation
// page, which shows the record it acts on).
type recordPage struct {
	*pageContext
	Rec      *store.Record
	State    stateInfo
	Reason   string
	Advice   advice
	Age      string
	Timeline []event
	Headers  []headerLine
	Body     bodyView
	Response bool // a stored response exists
	// Tool and Arguments are the agent's tool call that claimed the
	// record (a route with protocol: mcp): its name and its arguments,
	// redacted before they were stored and again for the page.
	Tool       string
	Arguments  string
	RouteKnown bool
	Confirm    bool // the route asks twice

	CanRelease, CanComplete bool
	// Owner is who resolves the route's held operations; Answers are what
	// its "not done" executions answered; CanRun offers Run now (its
	// reason in RunReason).
	Owner     string
	Answers   []answerRow
	CanRun    bool
	RunReason string
	// Verification shows the record's checks; CanVerify offers Verify
	// now (its reason in VerifyReason).
	Verification verificationView
	CanVerify    bool
	VerifyReason string
	// ReleaseReruns: releasing this (completed) record runs it again.
	ReleaseReruns bool
	// NoAction says why no action is offered.
	NoAction string

	// Form and ReleaseReason fill the complete and release forms (with
	// what was sent when an action was refused); Action is the action
	// refused or to confirm, Error why it was refused; Notice reports the
	// action just taken.
	Form          actionForm
	ReleaseReason string
	Action        string
	Error         string
	Notice        string
}

// newRecordPage lays out the record t found.
func newRecordPage(p *pageContext, t operator.Target) recordPage {
	rec, rt, known := t.Rec, t.Route, t.Known
	pg := recordPage{
		pageContext: p,
		Rec:         rec,
		State:       stateTag(rec.Class()),
		Reason:      reasonText(rec),
		Advice:      adviceFor(rec, p.Now),
		Age:         age(rec.StartedAt, p.Now),
		RouteKnown:  known,
		Confirm:     known && rt.Confirm,
		Form:        actionForm{Status: "200", ContentType: "application/json"},
	}
	pg.Timeline = timeline(rec, p.Now)
	pg.Verification = verificationOf(rec, p.Now)
	pg.CanVerify = canVerify(rec, rt, known)
	pg.CanRun = canRun(rec, rt, known, p.Now)
	pg.Owner, pg.Answers = rt.Owner, answersOf(rec)
	if rec.Call != nil {
		pg.Tool, pg.Arguments = rec.Call.Tool, t.Redactor().ToolArguments(rec.Call, "  ")
	}
	if rec.State == store.StateCompleted {
		pg.Response = true
		pg.Headers = redactHeader(rec.Header)
		pg.Body = showBody(rec, t.Redactor())
	}
	live := rec.State == store.StateInFlight && rec.LeaseUntil.After(p.Now)
	switch {
	case live:
		pg.NoAction = "The call is still running: it cannot be resolved by hand until it ends or its lease runs out."
	case t.Rec.CheckRunning(p.Now):
		pg.NoAction = "A verification check is asking the upstream right now: its answer may resolve the record. Reload in a moment to act."
	case rec.State == store.StateCompleted:
		pg.CanRelease, pg.ReleaseReruns = true, true
	default:
		pg.CanRelease, pg.CanComplete = true, true
	}
	return pg
}

// timeline lists what is known to have happened to rec, in time order;
// events without a time of their own come last.
func timeline(rec *store.Record, now time.Time) []event {
	var ev []event
	if !rec.StartedAt.IsZero() {
		ev = append(ev, event{At: rec.StartedAt, Kind: "start", Title: "Execution " + strconv.FormatInt(rec.Executions, 10) + " started",
			Detail: "The gateway forwarded the request upstream (" + plural(rec.Executions, "execution") + " and " +
				plural(rec.Attempts, "attempt") + " in all)."})
	}
	switch {
	case rec.State == store.StateInFlight && rec.LeaseUntil.After(now):
		ev = append(ev, event{At: rec.LeaseUntil, Kind: "lease", Title: "Lease runs until",
			Detail: "Renewed while the call runs; a retry before then gets 409."})
	case rec.State == store.StateInFlight || (rec.State == store.StateUnknown && rec.Reason == "lease_expired"):
		ev = append(ev, event{At: rec.LeaseUntil, Kind: "lease", Title: "Lease ran out", Detail: "No result arrived while the lease lasted."})
	}
	ev = append(ev, checkEvents(rec)...)
	// An operator's completion is its own event (the audit entry below).
	byOperator := rec.Reason == "operator" && len(rec.Audit) > 0 && rec.Audit[len(rec.Audit)-1].Action == store.AuditComplete
	if !rec.CompletedAt.IsZero() && !byOperator {
		ev = append(ev, event{At: rec.CompletedAt, Kind: "done", Title: "Completed with status " + strconv.Itoa(rec.Status),
			Detail: "Retries replay this answer."})
	}
	for i, a := range rec.Audit {
		title := a.Action + " by " + a.Actor
		switch a.Action {
		case store.AuditRelease:
			title = "Released by " + a.Actor
		case store.AuditComplete:
			title = "Completed by " + a.Actor
			if byOperator && i == len(rec.Audit)-1 {
				title += " with status " + strconv.Itoa(rec.Status)
			}
		case store.AuditVerify:
			title = "Check asked for by " + a.Actor
		case store.AuditRun:
			title = "Run now by " + a.Actor
		}
		detail := "No reason given."
		if a.Reason != "" {
			detail = "Reason: " + a.Reason
		}
		ev = append(ev, event{At: a.At, Kind: "operator", Title: title, Detail: detail})
	}
	slices.SortStableFunc(ev, func(a, b event) int { return a.At.Compare(b.At) })
	if rec.State == store.StateUnknown {
		ev = append(ev, event{Kind: "held", Title: stateTag(rec.Class()).Long,
			Detail: sentence(orDefault(reasonText(rec), "the gateway could not tell the outcome")) + "."})
	}
	return ev
}

// operator is the operator service over the console's stores, the admin
// API's too.
func (c *Console) operator() *operator.Service {
	return operator.New(c.stores)
}

// lookup finds a record for a page through the operator service,
// answering the error page itself (with the service's status) when it
// cannot (ok false).
func (c *Console) lookup(w http.ResponseWriter, r *http.Request, p *pageContext, id string) (operator.Target, bool) {
	t, err := c.operator().Find(r.Context(), id)
	switch operator.Status(err) {
	case http.StatusOK:
		return t, true
	case http.StatusBadRequest:
		p.renderError(w, http.StatusBadRequest, "Not a record", "Record ids are 32 hexadecimal characters, as in the 409 \"outcome unknown\" problem and the logs.")
	case http.StatusNotFound:
		p.renderError(w, http.StatusNotFound, "No such record", "No record store holds this record: it was never made, or it expired.")
	default:
		c.logger.Error("console: reading a record", zap.String("record_id", safeID(id)), zap.Error(err))
		p.renderError(w, http.StatusServiceUnavailable, "Record store unavailable", "The record store could not be read. Try again in a moment.")
	}
	return t, false
}

// serveRecord answers GET /records/{id}.
func (c *Console) serveRecord(w http.ResponseWriter, r *http.Request, p *pageContext, id string) {
	t, ok := c.lookup(w, r, p, id)
	if !ok {
		return
	}
	rec := t.Rec
	pg := newRecordPage(p, t)
	switch r.URL.Query().Get("done") {
	case actionRelease:
		pg.Notice = "Released. The next retry with the same payload runs the operation, once. Your reason is on the timeline."
	case actionComplete:
		pg.Notice = "Completed. Retries now get this answer without calling the upstream. Your reason is on the timeline."
	case actionVerify:
		pg.Notice = verifiedNotice(rec)
	case actionRun:
		pg.Notice = runNotice(rec)
	}
	p.render(w, http.StatusOK, "record", pg)
}
