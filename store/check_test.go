package store

import (
	"context"
	"testing"
	"time"
)

// TestCheckFieldsOnRedis: a claim with a check keeps it on the record
// hash; a record whose route has no verify rule carries no verification
// field at all (no extra Redis work). (The conformance suite checks
// BeginCheck and EndCheck on every engine.)
func TestCheckFieldsOnRedis(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		check := Check{Method: "GET", URL: "http://127.0.0.1:9001/crm/deals?source_key=evt_184", After: 2 * time.Second}
		with, plain := newID(t), newID(t)
		req := claimReq(with, "tok-A")
		req.Check = check
		if res := mustClaim(t, e.s, req); res.Record.Check != check {
			t.Errorf("claim reply check %+v, want %+v", res.Record.Check, check)
		}
		mustClaim(t, e.s, claimReq(plain, "tok-B"))
		for id, tok := range map[string]string{with: "tok-A", plain: "tok-B"} {
			ok, err := e.s.MarkUnknown(ctx, id, tok, "upstream_5xx", time.Hour)
			mustOK(t, "MarkUnknown", ok, err)
		}
		h, err := e.s.Client().HGetAll(ctx, e.s.Key(with)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if h[fCheck] != "GET "+check.URL || h[fCheckAfter] != "2000" || h[fNextCheck] == "" {
			t.Errorf("record with a check: %v", h)
		}
		if h, err = e.s.Client().HGetAll(ctx, e.s.Key(plain)).Result(); err != nil {
			t.Fatal(err)
		}
		for _, f := range fields[iCheck:] {
			if _, ok := h[f]; ok {
				t.Errorf("a record without a check has field %s", f)
			}
		}
	})
}
