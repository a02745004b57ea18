package caddymodule

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// Verification: when a route has a verify rule, an outcome the gateway
// cannot know (a 5xx, a timeout or reset after the request was sent, a
// gateway that died mid-call) is not left for an operator blindly. The
// claim keeps the check resolved from the request on the record (method
// and URL; the headers come from the route's config when a check runs).
// The gateway that saw the ambiguity schedules checks (after, then every,
// up to attempts); a retry that finds the record held runs one check
// first; an operator may run one at any time. Each check is fenced by the
// store (a store.CheckLease): one at a time per record, and its verdict
// lands only while the record is still held under the claim it was made
// for.

// Why a check ran, in logs.
const (
	checkScheduled = "schedule"
	checkRetry     = "retry"
	checkOperator  = "operator"
)

// checkClient makes the checks: its own connections, no cookies, and no
// redirects (a 3xx is an answer like any other, and configured headers
// never follow a redirect elsewhere).
var checkClient = &http.Client{
	Transport: http.DefaultTransport.(*http.Transport).Clone(),
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// provisionVerify lets the operator API reach this handler through its
// routes, to run a check on an operator's word.
func (h *Handler) provisionVerify() {
	for _, rt := range h.routes {
		rt.handler.Store(h)
	}
}

// resolveCheck resolves the route's check from the request, for the claim
// to keep on the record: its URL and the values of found.match. It is
// zero when the route has none or a placeholder is empty (a lookup for ""
// would find the wrong thing), or a match value is too long or not UTF-8:
// such a record is held for an operator as without verify.
func (h *Handler) resolveCheck(rt *route, key, id string, in *keying.Input) store.Check {
	v := rt.Verify
	if v == nil {
		return store.Check{}
	}
	unresolved := func(what string, err error) store.Check {
		h.logger.Debug("verify: the check cannot be resolved from this request; an unknown outcome will be held for an operator",
			zap.String("route", rt.Name), zap.String("record_id", id), zap.String("part", what), zap.Bool("empty_placeholder", err == nil))
		return store.Check{}
	}
	u, ok, err := v.URL.Resolve(key, id, in)
	if err != nil || !ok {
		return unresolved("url", err)
	}
	chk := store.Check{Method: v.Method, URL: u, After: v.After}
	for _, m := range v.FoundMatch {
		val, ok, err := m.Value.ResolveText(key, id, in)
		if err != nil || !ok {
			return unresolved("found.match", err)
		}
		if len(val) > store.MaxCheckMatchValue || !utf8.ValidString(val) {
			return unresolved("found.match", errors.New("too long or not UTF-8"))
		}
		chk.Match = append(chk.Match, store.CheckMatch{Path: m.Path, Value: val})
	}
	return chk
}

// checkLease is how long a check may hold its record's check lease: the
// lookup's timeout and the store calls around it.
func (h *Handler) checkLease(v *config.VerifyRule) time.Duration {
	return v.Timeout + 2*h.opTimeout() + time.Second
}

// checkRun is one check's result.
type checkRun struct {
	rec     *store.Record // the record after the check (or as found when none ran)
	ran     bool          // the check lease was ours and the check was recorded
	verdict string        // what the check found (when ran)
}

// checkOnce runs one check of the record held as held, with the route's
// verify rule: takes the check lease (only when due, if asked),
// asks the upstream, and records the verdict. fallback is the check to
// run when the record carries none; op is the operator who asked for it
// (nil for the gateway's own checks). A store failure is an error; a
// lookup failure is a verdict.
func (h *Handler) checkOnce(rt *route, held store.Fence, fallback store.Check, due bool, why string, op *store.Action) (checkRun, error) {
	v := rt.Verify
	ctx, cancel := context.WithTimeout(context.Background(), h.opTimeout())
	began := time.Now()
	lease, rec, err := store.BeginCheck(ctx, h.store, held, h.checkLease(v), due)
	cancel()
	h.metrics.observeStore("begin_check", began, err)
	if lease == nil {
		return checkRun{rec: rec}, err
	}
	chk := rec.Check
	if chk.IsZero() {
		chk = fallback
	}
	started := time.Now()
	entry, res, note := h.lookup(rt, chk)
	next := time.Duration(0)
	if rec.CheckCount+1 < int64(v.Attempts) {
		next = v.Every
	}
	ctx, cancel = context.WithTimeout(context.Background(), h.opTimeout())
	began = time.Now()
	after, ok, err := lease.End(ctx, store.CheckReport{
		Entry: entry, Result: res,
		NotFoundChecks: v.NotFoundChecks, Every: v.Every, Next: next, TTL: rt.TTL,
		Operator: op,
	})
	cancel()
	h.metrics.observeStore("end_check", began, err)
	h.metrics.verifications.WithLabelValues(rt.Name, entry.Verdict).Inc()
	fields := []zap.Field{
		zap.String("route", rt.Name), zap.String("record_id", held.ID()), zap.String("trigger", why),
		zap.String("verdict", entry.Verdict), zap.Int("status", entry.Status),
		zap.Duration("duration", time.Since(started)),
	}
	if note != "" {
		fields = append(fields, zap.String("note", note))
	}
	switch {
	case err != nil:
		h.logger.Warn("verification check ran but recording it failed; the record stays held", append(fields, zap.Error(err))...)
		return checkRun{rec: rec}, err
	case !ok:
		// An operator or a late real result resolved the record while the
		// check ran, or the lease ran out and another check took over.
		h.logger.Info("verification check came too late; the record was resolved meanwhile", fields...)
		return checkRun{rec: after}, nil
	}
	result := "held"
	switch after.State {
	case store.StateCompleted:
		result = "completed"
	case store.StateReleased:
		result = "released"
	}
	fields = append(fields, zap.String("record", result), zap.Int64("checks", after.CheckCount))
	if !after.NextCheck.IsZero() {
		fields = append(fields, zap.Time("next_check", after.NextCheck.UTC()))
	}
	h.logger.Info("verification check", fields...)
	return checkRun{rec: after, ran: true, verdict: entry.Verdict}, nil
}

// lookup asks the upstream once, within the rule's timeout, and judges
// the answer. note says why a check failed, without the URL (it holds
// the key) or any header.
func (h *Handler) lookup(rt *route, chk store.Check) (store.CheckEntry, store.Result, string) {
	v := rt.Verify
	fail := func(note string) (store.CheckEntry, store.Result, string) {
		return store.CheckEntry{Verdict: store.VerdictError}, store.Result{}, note
	}
	if chk.IsZero() {
		return fail("the record carries no check")
	}
	target := keying.ExpandEnv(chk.URL)
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail("the check URL is not an absolute http or https URL once {env.*} is filled in (is the variable set?)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), v.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, chk.Method, u.String(), nil)
	if err != nil {
		return fail("the check request cannot be made")
	}
	for _, hd := range v.Headers {
		req.Header.Set(hd.Name, keying.ExpandEnv(hd.Value))
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := checkClient.Do(req)
	if err != nil {
		return fail(lookupError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, rt.MaxResponse+1))
	entry := store.CheckEntry{Status: resp.StatusCode, Verdict: store.VerdictInconclusive}
	switch {
	case err != nil:
		entry.Verdict = store.VerdictError
		return entry, store.Result{}, "reading the answer: " + lookupError(err)
	case int64(len(body)) > rt.MaxResponse:
		return entry, store.Result{}, "the answer is larger than max_response"
	case v.NotFound(resp.StatusCode):
		entry.Verdict = store.VerdictNotApplied
		return entry, store.Result{}, ""
	case !v.Found(resp.StatusCode):
		return entry, store.Result{}, ""
	case keying.CheckDepth(body) != nil || !gjson.ValidBytes(body):
		return entry, store.Result{}, "the answer is not JSON"
	}
	verdict, res, note := judge(v, chk, body)
	if entry.Verdict = verdict; entry.Verdict != store.VerdictApplied {
		return entry, store.Result{}, note
	}
	res.Status = cmp.Or(v.ReplayStatus, resp.StatusCode)
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		res.Header = http.Header{"Content-Type": {ct}}
	}
	return entry, res, ""
}

// judge reads a lookup's answer with a found status, JSON within its
// depth limit: not applied when nothing is at found.id; inconclusive when
// its top level is an array of more than one element (a lookup that
// ignored its filter lists everything), when a match value differs or
// is missing (an answer about another operation), or when nothing is at
// found.object; otherwise applied, with the value at found.object (or
// the whole answer) as the result's body and the value at found.id as
// its external id.
func judge(v *config.VerifyRule, chk store.Check, body []byte) (string, store.Result, string) {
	n := 0
	if top := gjson.ParseBytes(body); top.IsArray() {
		top.ForEach(func(_, _ gjson.Result) bool { n++; return n < 2 })
	}
	if n > 1 {
		return store.VerdictInconclusive, store.Result{}, "the answer lists more than one object"
	}
	found := gjson.GetBytes(body, v.FoundID)
	if !found.Exists() || found.Type == gjson.Null || found.String() == "" {
		return store.VerdictNotApplied, store.Result{}, ""
	}
	for _, m := range chk.Match {
		got := gjson.GetBytes(body, m.Path)
		if m.Path == "" || !got.Exists() || got.Type == gjson.Null || got.IsObject() || got.IsArray() || got.String() != m.Value {
			return store.VerdictInconclusive, store.Result{}, "the answer is about another operation (a found.match value differs)"
		}
	}
	if !store.ValidExternalID(found.String()) {
		return store.VerdictInconclusive, store.Result{}, "the external id in the answer is too long or holds control characters"
	}
	res := store.Result{Body: body, ExternalID: found.String()}
	if v.FoundObject != "" {
		obj := gjson.GetBytes(body, v.FoundObject)
		if !obj.Exists() || obj.Type == gjson.Null {
			return store.VerdictInconclusive, store.Result{}, "nothing at found.object in the answer"
		}
		res.Body = []byte(obj.Raw)
	}
	return store.VerdictApplied, res, ""
}

// lookupError describes a failed lookup without its URL.
func lookupError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &op):
		return op.Op + ": " + op.Err.Error()
	}
	return err.Error()
}

// verifyHeld runs the inline check of a retry that found its record held
// as outcome unknown on a route with a verify rule, within the rule's
// timeout, and says what the retry does next: replay a verified result
// (g.rec is completed), execute once (a released record was claimed
// again: the claim), or answer 409 naming the next check (g.rec is held).
// When another check of the record is running, it waits for that one
// instead. A store failure leaves the record as found: the retry gets its
// 409.
func (h *Handler) verifyHeld(ctx context.Context, g *guarded, method string, in *keying.Input, fp string) (*store.Claim, error) {
	rec := g.rec
	if rec == nil || rec.State != store.StateUnknown || g.rt.Verify == nil || !h.sameFingerprint(rec, method, g.rt, in, fp) {
		return nil, nil
	}
	rt := g.rt
	if other := h.routeNamed(rec.Route); other != nil && other.Verify != nil {
		rt = other // the headers of the route that made the claim
	}
	run, err := h.checkOnce(rt, rec.Fence(), g.check, false, checkRetry, nil)
	if err != nil {
		h.metrics.storeErrors.WithLabelValues(g.rt.Name, "check").Inc()
		g.note = "verification check failed: " + err.Error()
		return nil, nil
	}
	if !run.ran && rec.Fence().Holds(run.rec) {
		run.rec = h.awaitCheck(ctx, rt, run.rec)
	}
	if run.ran {
		g.note = "verified: " + run.verdict
	}
	if run.rec == nil {
		// Gone (it expired meanwhile): claim afresh.
		return h.claim(ctx, g, method, in, fp)
	}
	g.rec = run.rec
	if run.rec.State == store.StateReleased {
		return h.claim(ctx, g, method, in, fp)
	}
	return nil, nil
}

// checkPoll is how often a retry looks at a record whose check another
// request is running.
const checkPoll = 50 * time.Millisecond

// awaitCheck waits, within the rule's timeout, for the check another
// request holds the lease of to end, polling the record; it returns the
// record as last read.
func (h *Handler) awaitCheck(ctx context.Context, rt *route, rec *store.Record) *store.Record {
	if !rec.CheckLeaseUntil.After(time.Now().Add(-time.Second)) {
		return rec
	}
	deadline := time.Now().Add(rt.Verify.Timeout + h.opTimeout())
	t := time.NewTimer(checkPoll)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return rec
		case <-t.C:
		}
		cur, err := h.store.Get(ctx, rec.ID)
		if err != nil {
			return rec
		}
		if cur == nil || cur.State != store.StateUnknown || cur.CheckLeaseUntil.IsZero() {
			return cur
		}
		rec = cur
		t.Reset(checkPoll)
	}
	return rec
}

// routeNamed returns this handler's route of that name, or nil.
func (h *Handler) routeNamed(name string) *route {
	for _, rt := range h.routes {
		if rt.Name == name {
			return rt
		}
	}
	return nil
}

// scheduleChecks starts the checks of a record that claim c left held on
// route rt: the first `after` the hold, then every `every`, until the
// record is resolved or its attempts are used up. Only a timer waits for
// a check; the handler keeps its store open until the schedule ends.
func (h *Handler) scheduleChecks(rt *route, c *store.Claim) {
	if rt.Verify == nil || rt.Verify.Attempts == 0 {
		return
	}
	h.enter()
	s := &checkSchedule{h: h, rt: rt, held: c.Fence()}
	s.timer = time.AfterFunc(rt.Verify.After, s.run)
}

// checkSchedule is the scheduled checks of one held record.
type checkSchedule struct {
	h        *Handler
	rt       *route
	held     store.Fence
	timer    *time.Timer
	failures int // store failures in a row
}

// run makes the scheduled check that is due (on the timer's goroutine)
// and sets the timer for the next one, or ends the schedule.
func (s *checkSchedule) run() {
	v := s.rt.Verify
	run, err := s.h.checkOnce(s.rt, s.held, store.Check{}, true, checkScheduled, nil)
	var wait time.Duration
	switch rec := run.rec; {
	case err != nil:
		// The store is unreachable: try again later, a few times.
		if s.failures++; s.failures > v.Attempts {
			s.h.logger.Warn("verification schedule gave up: the record store keeps failing; the record stays held",
				zap.String("route", s.rt.Name), zap.String("record_id", s.held.ID()), zap.Error(err))
			s.h.leave()
			return
		}
		wait = v.Every
	case !s.held.Holds(rec),
		rec.NextCheck.IsZero() || rec.CheckCount >= int64(v.Attempts):
		// Resolved, or gone, or its scheduled checks are done.
		s.h.leave()
		return
	default:
		s.failures = 0
		next := rec.NextCheck
		if rec.CheckLeaseUntil.After(next) {
			next = rec.CheckLeaseUntil // another check is running
		}
		// At least a little while: this gateway's clock may run ahead of
		// the store's, which decides when a check is due.
		wait = max(time.Until(next), v.Every/10, checkPoll)
	}
	s.timer.Reset(wait)
}

// withNextCheck tells a retry that got 409 for a held record when its
// outcome is checked next, if it is.
func withNextCheck(p *problem, rec *store.Record, now time.Time) {
	if rec.NextCheck.IsZero() {
		if len(rec.Checks) > 0 {
			p.Detail += fmt.Sprintf("; %d verification checks could not settle it", rec.CheckCount)
		}
		return
	}
	next := rec.NextCheck.UTC()
	p.NextCheck = &next
	p.Detail += "; it is being verified with the upstream, next check at " + next.Format(time.RFC3339)
	if now.IsZero() {
		now = time.Now()
	}
	p.retryAfter = int(max(next.Sub(now).Round(time.Second), time.Second) / time.Second)
}

// verifyNow runs one check of a held record on operator act's word,
// with this handler's rule for the record's route.
func (h *Handler) verifyNow(rt *route, rec *store.Record, act store.Action) (checkRun, error) {
	h.enter()
	defer h.leave()
	return h.checkOnce(rt, rec.Fence(), store.Check{}, false, checkOperator, &act)
}

// ErrNoVerify is returned by VerifyNow when the record's route has no
// verify rule in the running config.
var ErrNoVerify = errors.New("the record's route has no verify rule in the running config")

// operatorCheck runs an operator's check of rec, found in store s, on
// the live handler of the record's route, and returns the record after
// it. A record that is not held, carries no check, has a check running
// or was resolved while the check ran is a store.ErrConflict (with the
// current record, when there is one); a missing one store.ErrNotFound.
func operatorCheck(s liveStore, rec *store.Record, act store.Action) (*store.Record, string, error) {
	switch {
	case rec.State != store.StateUnknown:
		return rec, "", fmt.Errorf("%w: record %s is %s: only a record held as outcome unknown is verified", store.ErrConflict, rec.ID, rec.State)
	case rec.Check.IsZero():
		return rec, "", fmt.Errorf("%w: record %s carries no check (it was held before its route had a verify rule): release or complete it", store.ErrConflict, rec.ID)
	}
	rt := s.routes[rec.Route]
	var h *Handler
	if rt != nil {
		h = rt.handler.Load()
	}
	if rt == nil || rt.Verify == nil || h == nil {
		return rec, "", fmt.Errorf("%w: route %s", ErrNoVerify, rec.Route)
	}
	run, err := h.verifyNow(rt, rec, act)
	switch {
	case err != nil:
		return nil, "", err
	case run.rec == nil:
		return nil, "", fmt.Errorf("%w: %s", store.ErrNotFound, rec.ID)
	case !run.ran && rec.Fence().Holds(run.rec):
		return run.rec, "", fmt.Errorf("%w: a check of record %s is running; look again in a moment", store.ErrConflict, rec.ID)
	case !run.ran:
		return run.rec, "", fmt.Errorf("%w: record %s was resolved while the check ran (it is %s now); the check changed nothing", store.ErrConflict, rec.ID, run.rec.State)
	}
	return run.rec, run.verdict, nil
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

// verify answers POST /idempotency/records/{id}/verify: one check of a
// held record, now, with the rule of the running config; the answer is
// the record after it.
func (a *AdminAPI) verify(w http.ResponseWriter, r *http.Request, id string) error {
	req, err := readVerifyRequest(w, r)
	if err != nil {
		return err
	}
	found, s, err := a.find(r.Context(), id)
	if err != nil {
		return err
	}
	act := store.Action{Actor: adminActor, Reason: req.Reason}
	rec, verdict, err := operatorCheck(s, found, act)
	switch {
	case errors.Is(err, ErrNoVerify):
		return apiError(http.StatusConflict, "%v", err)
	case err != nil:
		return storeError(err)
	}
	a.log().Info("record verified by an operator",
		zap.String("route", found.Route), zap.String("record_id", id), zap.String("actor", act.Actor),
		zap.String("verdict", verdict), zap.String("state", string(rec.State)))
	return writeJSON(w, view(rec, s.redactor(rec.Route)))
}

// verifyRequest is the body of POST /idempotency/records/{id}/verify,
// which may also be empty.
type verifyRequest struct {
	// Reason is kept on the record's audit trail.
	Reason string `json:"reason"`
}

// readVerifyRequest reads an optional verify request: nothing, or one
// JSON object without unknown fields.
func readVerifyRequest(w http.ResponseWriter, r *http.Request) (verifyRequest, error) {
	var req verifyRequest
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, adminMaxRequest))
	if err != nil {
		return req, apiError(http.StatusBadRequest, "request body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return req, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, apiError(http.StatusBadRequest, "request body: %v", err)
	}
	if dec.More() {
		return req, apiError(http.StatusBadRequest, "request body: more than one JSON value")
	}
	if len(req.Reason) > store.MaxReasonLen || !utf8.ValidString(req.Reason) {
		return req, apiError(http.StatusBadRequest, "reason: at most %d bytes of UTF-8 text", store.MaxReasonLen)
	}
	return req, nil
}
