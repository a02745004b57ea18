package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store"
)

// TestOperatorWaitsForCheck: a retry of a held record runs a
// verification check whose lookup is slow; meanwhile an operator
// completes, then releases the record through the admin API. Both are
// refused with 409 (a check holds the record), the check's "found"
// verdict lands, the retry replays the deal, and the operation ran once.
//
// Expected, on both stores: complete 409, release 409, the retry
// replays the check's answer naming the deal, 1 deal in the CRM, the record completed
// (verified) with executions 1 and no operator on its audit trail.
func TestOperatorWaitsForCheck(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		crm := newVerifyCRM(t)
		gw := verifyStart(t, crm, b.store(t))
		key := "evt_190:create_crm_deal"
		id := recordID("manual", "", key)
		if r := verifyPost(gw.url+"/manual/deals", key, "reset"); r.status != http.StatusBadGateway {
			t.Fatalf("first delivery: %d %s, want 502 (the CRM reset the connection)", r.status, r.body)
		}
		deals := crm.dealsOf(key)
		if len(deals) != 1 {
			t.Fatalf("deals after the reset: %v, want 1", deals)
		}

		crm.holdLookups()
		retried := make(chan response, 1)
		go func() { retried <- verifyPost(gw.url+"/manual/deals", key, "") }()
		<-crm.lookupWaited // the retry's check is asking the CRM

		base := "/idempotency/records/" + id
		msg := adminError(t, gw, http.MethodPost, base+"/complete", `{"status":201,"body":"{}"}`, http.StatusConflict)
		if !strings.Contains(msg, "verification check") {
			t.Errorf("complete during the check: %q, want a message naming the running check", msg)
		}
		msg = adminError(t, gw, http.MethodPost, base+"/release", `{"reason":"no deal in the CRM"}`, http.StatusConflict)
		if !strings.Contains(msg, "verification check") {
			t.Errorf("release during the check: %q, want a message naming the running check", msg)
		}
		crm.openLookups()

		for i, r := range []response{<-retried, verifyPost(gw.url+"/manual/deals", key, "")} {
			if r.status/100 != 2 || r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(r.body), deals[0]) {
				t.Errorf("retry %d: %d (replayed %q) %s, want the replay of the check's answer naming %s",
					i+1, r.status, r.header.Get("Idempotent-Replayed"), r.body, deals[0])
			}
		}
		if n := len(crm.dealsOf(key)); n != 1 {
			t.Errorf("deals: %d, want 1 (the operation ran once)", n)
		}
		rec := verifyGet(t, gw, id)
		if rec.State != store.StateCompleted || rec.Reason != store.ReasonVerified || rec.Executions != 1 ||
			rec.ExternalID != deals[0] || len(rec.Audit) != 0 {
			t.Errorf("record: %+v, want completed (verified), executions 1, external id %s, no operator action", rec, deals[0])
		}
		t.Logf("after the refused complete and release: record %s (%s), deals %d, executions %d",
			rec.State, rec.Reason, len(crm.dealsOf(key)), rec.Executions)
	})
}
