package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store"
)

// TestSoakCheck: the soak's checker against made-up histories of one key,
// for the retry budget (soakMaxExecutions "not done" executions, then the
// record is held as retries exhausted) beside the policies it already
// knew. No Redis and no gateway: only soakCheck.
func TestSoakCheck(t *testing.T) {
	const exhausted = "retries-exhausted"
	calls := func(actions ...soakAction) []soakCall {
		out := make([]soakCall, len(actions))
		for i, a := range actions {
			out[i] = soakCall{exec: i + 1, action: a}
		}
		return out
	}
	answers := func(statuses ...int) []soakDelivery {
		out := make([]soakDelivery, len(statuses))
		for i, s := range statuses {
			out[i] = soakDelivery{status: s}
		}
		return out
	}
	held := func(d []soakDelivery, problem string) []soakDelivery {
		return append(d, soakDelivery{status: http.StatusConflict, problem: problem})
	}
	record := func(state store.State, reason string, executions, attempts, notDone int64) *store.Record {
		return &store.Record{State: state, Reason: reason, Executions: executions, Attempts: attempts, NotDone: notDone}
	}
	budget := int64(soakMaxExecutions)
	all429 := make([]soakAction, soakMaxExecutions)
	for i := range all429 {
		all429[i] = soak429
	}
	statuses429 := make([]int, soakMaxExecutions)
	for i := range statuses429 {
		statuses429[i] = http.StatusTooManyRequests
	}
	cases := []struct {
		name       string
		policy     string
		rec        *store.Record
		calls      []soakCall
		deliveries []soakDelivery
		tr         soakTrouble
		want       string // a substring of the first violation; "" for none
	}{
		{
			name:   "hold: budget used up, held as exhausted, the retry gets 409 retries-exhausted",
			policy: "hold",
			rec:    record(store.StateUnknown, store.ReasonRetriesExhausted, budget, budget+1, budget),
			calls:  calls(all429...), deliveries: held(answers(statuses429...), exhausted),
		},
		{
			name:   "release: 500s and drops count like 429s, the budget-th of them holds",
			policy: "release",
			rec:    record(store.StateUnknown, store.ReasonRetriesExhausted, budget, budget+1, budget),
			calls:  calls(append([]soakAction{soak500, soakDrop}, all429[2:]...)...),
			deliveries: held(answers(append([]int{http.StatusInternalServerError, http.StatusBadGateway}, statuses429[2:]...)...),
				exhausted),
		},
		{
			name:   "release: a call after 500s and drops used up the budget",
			policy: "release",
			rec:    record(store.StateCompleted, "", budget+1, budget+1, budget),
			calls:  calls(append([]soakAction{soak500, soakDrop}, append(all429[2:], soakOK)...)...),
			deliveries: answers(append([]int{http.StatusInternalServerError, http.StatusBadGateway},
				append(statuses429[2:], http.StatusCreated)...)...),
			want: fmt.Sprintf("call %d ran after call %d", budget+1, budget),
		},
		{
			name:   "hold: a call after the budget was used up",
			policy: "hold",
			rec:    record(store.StateCompleted, "", budget+1, budget+1, budget),
			calls:  calls(append(all429, soakOK)...), deliveries: answers(append(statuses429, http.StatusCreated)...),
			want: fmt.Sprintf("call %d ran after call %d", budget+1, budget),
		},
		{
			name:   "hold: released after the budget-th 429",
			policy: "hold",
			rec:    record(store.StateReleased, "", budget, budget, budget),
			calls:  calls(all429...), deliveries: answers(statuses429...),
			want: "want retries exhausted",
		},
		{
			name:   "hold: held as exhausted before the budget was used up",
			policy: "hold",
			rec:    record(store.StateUnknown, store.ReasonRetriesExhausted, budget-1, budget, budget-1),
			calls:  calls(all429[1:]...), deliveries: held(answers(statuses429[1:]...), exhausted),
			want: "want released",
		},
		{
			name:   "hold: exhausted, but the record counts another number of not-done executions",
			policy: "hold",
			rec:    record(store.StateUnknown, store.ReasonRetriesExhausted, budget, budget, budget+1),
			calls:  calls(all429...), deliveries: answers(statuses429...),
			want: "not-done executions",
		},
		{
			name:   "hold: 409 retries-exhausted on a record that is not exhausted",
			policy: "hold",
			rec:    record(store.StateReleased, "", 1, 2, 1),
			calls:  calls(soak429), deliveries: held(answers(http.StatusTooManyRequests), exhausted),
			want: "answered 409 retries-exhausted",
		},
		{
			name:   "release: a store failure hid one not-done execution, so one more 429 may run",
			policy: "release",
			rec:    record(store.StateUnknown, store.ReasonRetriesExhausted, budget+1, budget+1, budget),
			calls:  calls(append(all429, soak429)...), deliveries: answers(append(statuses429, http.StatusTooManyRequests)...),
			tr: soakTrouble{settleErrors: 1},
		},
		{
			name:   "hold: below the budget a 429 releases, as before",
			policy: "hold",
			rec:    record(store.StateCompleted, "", 2, 2, 1),
			calls:  calls(soak429, soakOK), deliveries: answers(http.StatusTooManyRequests, http.StatusCreated),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p *soakPolicy
			for i := range soakPolicies {
				if soakPolicies[i].onUnknown == tc.policy {
					p = &soakPolicies[i]
				}
			}
			if p == nil {
				t.Fatalf("no soak policy %q", tc.policy)
			}
			k := &soakKey{name: "soak-check", policy: p, id: "rec"}
			for i := range tc.calls {
				tc.calls[i].keyHeader = k.name
			}
			if tc.rec.State == store.StateCompleted {
				tc.rec.Status = http.StatusCreated
				tc.rec.Body = fmt.Appendf(nil, `{"exec":%d}`, len(tc.calls))
			}
			v := soakCheck(k, tc.rec, tc.calls, tc.deliveries, tc.tr)
			switch {
			case tc.want == "" && len(v) > 0:
				t.Errorf("violations %q, want none", v)
			case tc.want != "" && len(v) == 0:
				t.Errorf("no violation, want one saying %q", tc.want)
			case tc.want != "" && !strings.Contains(v[0], tc.want):
				t.Errorf("first violation %q, want one saying %q", v[0], tc.want)
			}
		})
	}
}
