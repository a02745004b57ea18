package redis

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// claimFieldsOf splits the claim part of a stored record.
func claimFieldsOf(stored string) (c [numClaimFields]string, ok bool) {
	n, ok := digits(stored[blobClaimLen:blobHeader])
	if !ok {
		return c, false
	}
	rest := stored[blobHeader : blobHeader+n]
	for i := range c {
		if c[i], rest, ok = netstring(rest); !ok {
			return c, false
		}
	}
	return c, true
}

// TestCheckFieldsOnRedis: a claim with a check keeps it on the record; a record whose route has no verify rule carries no verification
// field at all (no extra Redis work). (The conformance suite checks
// BeginCheck and EndCheck on every engine.)
func TestCheckFieldsOnRedis(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		check := store.Check{Method: "GET", URL: "http://127.0.0.1:9001/crm/deals?source_key=evt_184", After: 2 * time.Second,
			Match: []store.CheckMatch{{Path: "0.source_key", Value: "evt_184"}}}
		with, plain := storetest.NewID(t), storetest.NewID(t)
		req := storetest.ClaimReq(with, "tok-A")
		req.Check = check
		if res := storetest.MustClaim(t, e.s, req); !reflect.DeepEqual(res.Record.Check, check) {
			t.Errorf("claim reply check %+v, want %+v", res.Record.Check, check)
		}
		storetest.MustClaim(t, e.s, storetest.ClaimReq(plain, "tok-B"))
		for id, tok := range map[string]string{with: "tok-A", plain: "tok-B"} {
			ok, err := e.s.MarkUnknown(ctx, id, tok, "upstream_5xx", time.Hour)
			storetest.MustOK(t, "MarkUnknown", ok, err)
		}
		r := storetest.MustGet(t, e.s, with)
		if !reflect.DeepEqual(r.Check, check) || r.NextCheck.IsZero() {
			t.Errorf("record with a check: %+v", r)
		}
		stored, err := e.s.Client().Get(ctx, e.s.Key(plain)).Result()
		if err != nil {
			t.Fatal(err)
		}
		c, ok := claimFieldsOf(stored)
		if !ok {
			t.Fatalf("stored record %q does not read", stored)
		}
		for _, i := range []int{cCheck, cCheckAfter, cCheckCount, cNextCheck, cNotFoundStreak, cNotFoundAt, cCheckToken, cCheckLeaseUntil, cChecks} {
			if c[i] != "" {
				t.Errorf("a record without a check has field %s = %q", claimFields[i], c[i])
			}
		}
	})
}
