package redis

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/storetest"
)

// TestCreatedClaimRecord: a claim that creates a record answers with the
// code and the clock only, and the record the store builds from the
// request is the one Redis holds, field for field.
func TestCreatedClaimRecord(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, lease := range []time.Duration{30 * time.Second, 1500*time.Millisecond + 1} {
			req := storetest.ClaimReq(storetest.NewID(t), "tok-created")
			req.Lease = lease
			res, err := e.s.Claim(ctx, req)
			if err != nil || !res.Claimed || res.TakeOver {
				t.Fatalf("Claim: %+v, %v", res, err)
			}
			stored, err := e.s.Get(ctx, req.ID)
			if err != nil || stored == nil {
				t.Fatalf("Get: %+v, %v", stored, err)
			}
			if !reflect.DeepEqual(res.Record, stored) {
				t.Errorf("lease %v: claim built\n%+v\nRedis holds\n%+v", lease, res.Record, stored)
			}
			if !res.Record.StartedAt.Equal(res.Now) {
				t.Errorf("started at %v, the script's clock was %v", res.Record.StartedAt, res.Now)
			}
		}
	})
}
