package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func init() {
	register(test{"ToolCall", testToolCall})
}

// toolCallReq is ClaimReq for a call of tool with arguments args, as the
// gateway keeps them (JSON on one line, credentials already redacted).
func toolCallReq(id, token, tool, args string) store.ClaimRequest {
	req := ClaimReq(id, token)
	req.Route = "crm_tools"
	req.Call = store.NewToolCall(tool, args)
	return req
}

// sameCall fails unless got is the tool call want.
func sameCall(t *testing.T, what string, got, want *store.ToolCall) {
	t.Helper()
	if got == nil || want == nil {
		if got != want {
			t.Fatalf("%s: tool call %+v, want %+v", what, got, want)
		}
		return
	}
	if *got != *want {
		t.Fatalf("%s: tool call %+v, want %+v", what, *got, *want)
	}
}

// A claim's tool call (redacted before it reaches the engine) comes back
// from Get and List, kept through a hold, an operator's release and a
// completion; a takeover keeps its own; a claim without one has none.
func testToolCall(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id, plain := NewID(t), NewID(t)
	req := toolCallReq(id, "tok-1", "create_deal",
		`{"event_id":"evt_8812","name":"Acme renewal","password":"[redacted]","auth":"[redacted]","customer_note":"[redacted]"}`)
	want := &store.ToolCall{Tool: "create_deal",
		Arguments: `{"event_id":"evt_8812","name":"Acme renewal","password":"[redacted]","auth":"[redacted]","customer_note":"[redacted]"}`}
	sameCall(t, "NewToolCall", req.Call, want)
	res := MustClaim(t, e, req)
	sameCall(t, "the claim's record", res.Record.Call, want)
	sameCall(t, "Get after the claim", MustGet(t, e, id).Call, want)
	MustClaim(t, e, ClaimReq(plain, "tok-p"))
	sameCall(t, "a claim without a tool call", MustGet(t, e, plain).Call, nil)

	listed := func(state store.State) *store.ToolCall {
		t.Helper()
		for _, r := range ListEvery(t, e, store.ListFilter{State: state, Route: "crm_tools"}) {
			if r.ID == id {
				return r.Call
			}
		}
		t.Fatalf("List(%s): %s not listed", state, id)
		return nil
	}
	sameCall(t, "List in flight", listed(store.StateInFlight), want)

	ok, err := res.Claim.MarkUnknown(ctx, "upstream_reset")
	MustOK(t, "MarkUnknown", ok, err)
	sameCall(t, "Get when held", MustGet(t, e, id).Call, want)
	sameCall(t, "List when held", listed(store.StateUnknown), want)

	if _, err := e.OperatorRelease(ctx, id, store.Action{Actor: "alice", Reason: "the deal was not created"}, time.Hour); err != nil {
		t.Fatalf("OperatorRelease: %v", err)
	}
	sameCall(t, "Get after an operator's release", MustGet(t, e, id).Call, want)

	// The retry takes the record over with its own call.
	retry := toolCallReq(id, "tok-2", "create_deal", `{"event_id":"evt_8812","name":"Acme renewal","token":"[redacted]"}`)
	res = MustClaim(t, e, retry)
	if !res.Claimed || !res.TakeOver {
		t.Fatalf("the retry: claimed %v, takeover %v, record %+v", res.Claimed, res.TakeOver, res.Record)
	}
	want = &store.ToolCall{Tool: "create_deal", Arguments: `{"event_id":"evt_8812","name":"Acme renewal","token":"[redacted]"}`}
	sameCall(t, "the takeover's record", res.Record.Call, want)
	sameCall(t, "Get after the takeover", MustGet(t, e, id).Call, want)
	ok, err = res.Claim.Complete(ctx, store.Result{Status: 200, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)})
	MustOK(t, "Complete", ok, err)
	sameCall(t, "Get when completed", MustGet(t, e, id).Call, want)
	sameCall(t, "List when completed", listed(store.StateCompleted), want)

	// Long arguments are cut, and marked so, before they are stored.
	long := NewID(t)
	big := toolCallReq(long, "tok-l", "send_message", `{"body":"`+strings.Repeat("é", 3000)+`","secret":"[redacted]"}`)
	if n := len(big.Call.Arguments); n > store.MaxToolArguments+64 || !strings.Contains(big.Call.Arguments, "… (cut: ") {
		t.Fatalf("long arguments kept as %d bytes: …%s", n, big.Call.Arguments[max(0, n-40):])
	}
	MustClaim(t, e, big)
	sameCall(t, "Get of long arguments", MustGet(t, e, long).Call, big.Call)
}
