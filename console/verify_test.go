package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// heldWithCheck makes a held record of route that carries a check.
func (f *fixture) heldWithCheck(route string) string {
	f.t.Helper()
	id, tok := f.newID(), store.NewToken()
	res, err := f.s.Claim(context.Background(), store.ClaimRequest{
		ID: id, Route: route, Operation: route, Fingerprint: "fp", FingerprintRule: "whole",
		Token: tok, Lease: 30 * time.Second, HoldTTL: time.Hour,
		Check: store.Check{Method: "GET", URL: "{env.CRM_URL}/crm/deals?source_key=evt_184", After: time.Hour},
	})
	if err != nil || !res.Claimed {
		f.t.Fatalf("Claim: %+v, %v", res, err)
	}
	if ok, err := f.s.MarkUnknown(context.Background(), id, tok, "upstream_error", time.Hour); !ok || err != nil {
		f.t.Fatalf("MarkUnknown: %v, %v", ok, err)
	}
	return id
}

// TestVerifyFromTheConsole: a held record with a check shows its
// verification and offers Verify now; the action runs a check through
// the same fenced store calls as the admin API and keeps it on the
// audit trail; the queue names the checks and the next one.
func TestVerifyFromTheConsole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.routes["verified"] = config.Resolved{Name: "verified", Operation: "verified", TTL: time.Hour,
		Verify: &config.VerifyRule{Method: "GET", Timeout: time.Second, Every: time.Minute, Attempts: 5, NotFoundChecks: 2}}
	verdict := store.VerdictInconclusive
	f.verify = func(ctx context.Context, rec *store.Record, act store.Action) (*store.Record, error) {
		id := rec.ID
		lease, rec, err := store.BeginCheck(ctx, f.s, rec.Fence(), time.Minute, false)
		if err != nil || lease == nil {
			return rec, fmt.Errorf("%w: a check of record %s is running; look again in a moment", store.ErrConflict, id)
		}
		r := store.CheckReport{Entry: store.CheckEntry{Status: 200, Verdict: verdict}, NotFoundChecks: 2,
			Every: time.Minute, Next: time.Minute, TTL: time.Hour, Operator: &act}
		if verdict == store.VerdictApplied {
			r.Result = store.Result{Status: 201, Body: []byte(`[{"id":"D-9021"}]`), ExternalID: "D-9021"}
		}
		rec, _, err = lease.End(ctx, r)
		return rec, err
	}
	id := f.heldWithCheck("verified")
	page := f.do(req{method: "GET", path: "/records/" + id, user: "alice"}).Body.String()
	mustContain(t, page, "Verification", "<code>GET {env.CRM_URL}/crm/deals?source_key=evt_184</code>", "No check yet.",
		`action="../records/`+id+`/verify"`, "Next scheduled check", "every retry checks first")

	post := func() *http.Response {
		t.Helper()
		return f.do(req{method: "POST", path: "/records/" + id + "/verify", user: "alice", form: url.Values{
			"csrf_token": {f.token(id, "alice")}, "reason": {"the CRM answers again"},
		}}).Result()
	}
	if resp := post(); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "../../records/"+id+"?done=verify" {
		t.Fatalf("verify: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	rec := f.get(id)
	if rec.State != store.StateUnknown || len(rec.Checks) != 1 || len(rec.Audit) != 1 || rec.Audit[0].Action != store.AuditVerify || rec.Audit[0].Actor != "alice" {
		t.Fatalf("after the check: %+v", rec)
	}
	page = f.do(req{method: "GET", path: "/records/" + id + "?done=verify", user: "alice"}).Body.String()
	mustContain(t, page, "Checked upstream: no clear answer. The record stays held.", "Check asked for by alice",
		"<code>inconclusive</code> no clear answer")
	queue := f.do(req{method: "GET", path: "/?state=outcome_unknown", user: "alice"}).Body.String()
	mustContain(t, queue, "1 check, last no clear answer; next at ")

	verdict = store.VerdictApplied
	post()
	page = f.do(req{method: "GET", path: "/records/" + id + "?done=verify", user: "alice"}).Body.String()
	mustContain(t, page, "Checked upstream: the operation took effect.", "found upstream by a verification check")
	mustNotContain(t, page, `/verify"`)
	if rec := f.get(id); rec.State != store.StateCompleted || rec.ExternalID != "D-9021" {
		t.Fatalf("after the applied check: %+v", rec)
	}
	// A check on a completed record is refused, and says why.
	f.verify = func(context.Context, *store.Record, store.Action) (*store.Record, error) {
		return nil, fmt.Errorf("%w: record %s is completed: only a record held as outcome unknown is verified", store.ErrConflict, id)
	}
	w := f.do(req{method: "POST", path: "/records/" + id + "/verify", user: "alice", form: url.Values{
		"csrf_token": {f.token(id, "alice")}, "reason": {"again"},
	}})
	if w.Code != http.StatusConflict {
		t.Fatalf("verify of a completed record: %d", w.Code)
	}
	mustContain(t, w.Body.String(), "Not done: record "+id+" is completed: only a record held as outcome unknown is verified.")
}

// TestActionsWaitForCheck: while a verification check holds a record,
// the page offers no action and says why, and a release or completion
// sent anyway is refused with 409 (the store refuses it): the check's
// verdict is not lost.
func TestActionsWaitForCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.heldWithCheck("create_crm_deal")
	lease, _, err := store.BeginCheck(context.Background(), f.s, f.get(id).Fence(), time.Minute, false)
	if err != nil || lease == nil {
		t.Fatalf("BeginCheck: %v, %v", lease, err)
	}
	page := f.do(req{method: "GET", path: "/records/" + id, user: "alice"}).Body.String()
	mustContain(t, page, "A verification check is asking the upstream right now")
	// The page offers no form: send what an earlier page's would.
	tok := f.c.csrfToken("alice", time.Now())
	for _, action := range []string{actionRelease, actionComplete} {
		w := f.do(req{method: "POST", path: "/records/" + id + "/" + action, user: "alice", form: url.Values{
			"csrf_token": {tok}, "reason": {"no deal"}, "status": {"201"}, "body": {`{"id":"D-1"}`}}})
		if w.Code != http.StatusConflict {
			t.Fatalf("%s during a check: %d, want 409", action, w.Code)
		}
		mustContain(t, w.Body.String(), "a verification check is asking the upstream right now")
	}
	if rec := f.get(id); rec.State != store.StateUnknown || len(rec.Audit) != 0 {
		t.Fatalf("the refused actions changed the record: %+v", rec)
	}
}
