package redis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// testAction is the operator action the tests resolve records with.
var testAction = store.Action{Actor: "alice", Reason: "checked the CRM: no deal"}

// heldRecord makes a record held as outcome unknown.
func heldRecord(t *testing.T, s *Store) string {
	t.Helper()
	id := storetest.NewID(t)
	storetest.MustClaim(t, s, storetest.ClaimReq(id, "tok-A"))
	ok, err := s.MarkUnknown(context.Background(), id, "tok-A", "upstream_5xx", time.Hour)
	storetest.MustOK(t, "MarkUnknown", ok, err)
	return id
}

// TestOperatorAuditOnRedis: the trail keeps the last MaxAuditEntries
// actions, oldest first; any text round trips; refused actions change
// nothing. (The conformance suite checks the trail on every engine.)
func TestOperatorAuditOnRedis(t *testing.T) {
	t.Parallel()
	e := openRedis(t)
	ctx := context.Background()
	t.Run("bounded", func(t *testing.T) {
		id := heldRecord(t, e.s)
		const n = store.MaxAuditEntries + 7
		var rec *store.Record
		for i := range n {
			var err error
			if rec, err = e.s.OperatorRelease(ctx, id, store.Action{Actor: "op", Reason: fmt.Sprint(i)}, time.Hour); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
		}
		if len(rec.Audit) != store.MaxAuditEntries {
			t.Fatalf("%d entries kept, want %d", len(rec.Audit), store.MaxAuditEntries)
		}
		for i, a := range rec.Audit {
			if want := fmt.Sprint(n - store.MaxAuditEntries + i); a.Reason != want {
				t.Fatalf("entry %d has reason %q, want %q (the oldest are dropped)", i, a.Reason, want)
			}
			if i > 0 && a.At.Before(rec.Audit[i-1].At) {
				t.Fatalf("entry %d at %v is before entry %d at %v", i, a.At, i-1, rec.Audit[i-1].At)
			}
		}
	})
	t.Run("text round trips", func(t *testing.T) {
		id := heldRecord(t, e.s)
		act := store.Action{Actor: "élise@example.com", Reason: "line one\nline \"two\"\r\n\ttab, {braces}, </script>, ünïcode ✓"}
		if _, err := e.s.OperatorComplete(ctx, id, storetest.SampleResult(), act, time.Hour); err != nil {
			t.Fatal(err)
		}
		got := storetest.MustGet(t, e.s, id)
		if len(got.Audit) != 1 || got.Audit[0].Actor != act.Actor || got.Audit[0].Reason != act.Reason || got.Audit[0].Action != store.AuditComplete {
			t.Fatalf("audit %+v", got.Audit)
		}
	})
	t.Run("refused actions change nothing", func(t *testing.T) {
		id := heldRecord(t, e.s)
		before := storetest.MustGet(t, e.s, id)
		for _, act := range []store.Action{
			{},
			{Actor: "", Reason: "who?"},
			{Actor: "a\nb"},
			{Actor: strings.Repeat("a", store.MaxActorLen+1)},
			{Actor: "op", Reason: strings.Repeat("r", store.MaxReasonLen+1)},
			{Actor: "op", Reason: "\xff"},
		} {
			if _, err := e.s.OperatorRelease(ctx, id, act, time.Hour); !errors.Is(err, store.ErrInvalidArgument) {
				t.Errorf("release with %.40q: %v, want ErrInvalidArgument", act, err)
			}
			if _, err := e.s.OperatorComplete(ctx, id, storetest.SampleResult(), act, time.Hour); !errors.Is(err, store.ErrInvalidArgument) {
				t.Errorf("complete with %.40q: %v, want ErrInvalidArgument", act, err)
			}
		}
		if got := storetest.MustGet(t, e.s, id); !reflect.DeepEqual(got, before) {
			t.Fatalf("a refused action changed the record: %+v", got)
		}
	})
}

func TestDecodeAuditSkipsForeignLines(t *testing.T) {
	got := decodeAudit(`{"at":1000,"actor":"a","action":"release"}` + "\nnot json\n" + `{"at":2000,"actor":"b"}` + "\n" +
		`{"at":3000,"actor":"c","action":"complete","reason":"r"}`)
	want := []store.AuditEntry{
		{At: time.UnixMilli(1000), Actor: "a", Action: "release"},
		{At: time.UnixMilli(3000), Actor: "c", Action: "complete", Reason: "r"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeAudit = %+v, want %+v", got, want)
	}
}
