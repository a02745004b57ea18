package embedded

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// TestRecordCodecOlderForms: a record decodes from every form an earlier
// version wrote: without Unknowns (before unknown outcomes counted against
// the budget) it reads as 0, with the rest of the recovery section intact.
func TestRecordCodecOlderForms(t *testing.T) {
	r := &rec{Record: store.Record{
		ID: "0123456789abcdef0123456789abcdef", Route: "r", Operation: "r", State: store.StateReleased,
		Token: "tok", Reason: store.ReasonUnknownReleased, StartedAt: time.UnixMilli(1_700_000_000_000),
		Attempts: 3, Executions: 3, NotDone: 3, Unknowns: 2,
		Answers: []store.Answer{{At: time.UnixMilli(1_700_000_000_500), Status: 502}},
		Request: []byte("sealed"),
	}, ExpireAt: 1_700_000_100_000}
	full := encodeRecord(r, tomb{})
	unknowns := binary.AppendVarint(nil, r.Unknowns)
	if !bytes.HasSuffix(full, unknowns) {
		t.Fatalf("the record does not end with Unknowns: %q", full)
	}
	for _, tc := range []struct {
		name         string
		b            []byte
		wantUnknowns int64
	}{
		{"current", full, 2},
		{"before unknown outcomes counted", full[:len(full)-len(unknowns)], 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, past, err := decodeRecord(tc.b)
			if err != nil || past != (tomb{}) {
				t.Fatal(past, err)
			}
			if got.Unknowns != tc.wantUnknowns || got.NotDone != 3 || !bytes.Equal(got.Request, r.Request) ||
				len(got.Answers) != 1 || got.Answers[0].Status != 502 || got.Reason != store.ReasonUnknownReleased {
				t.Fatalf("decoded %+v", got.Record)
			}
		})
	}
}

// TestRecordCodecTombstone: a record key's value carries a tombstone
// after the record's fields, or holds one alone; a record without one
// is encoded as before tombstones.
func TestRecordCodecTombstone(t *testing.T) {
	r := &rec{Record: store.Record{
		ID: "0123456789abcdef0123456789abcdef", Route: "r", Operation: "r", State: store.StateCompleted,
		Token: "tok", StartedAt: time.UnixMilli(1_700_000_000_000), CompletedAt: time.UnixMilli(1_700_000_000_100),
		Attempts: 1, Executions: 1, Result: store.Result{Status: 201, Body: []byte("done")},
	}, ExpireAt: 1_700_000_100_000}
	want := tomb{until: 1_700_003_700_000, completedAt: 1_699_000_000_000, status: 200, reason: store.ReasonOperator}
	plain := encodeRecord(r, tomb{})
	carrying := encodeRecord(r, want)
	if !bytes.HasPrefix(carrying, plain) {
		t.Fatalf("the tombstone is not a trailing section: %q, %q", plain, carrying)
	}
	for _, tc := range []struct {
		name   string
		v      []byte
		record bool
		past   tomb
	}{
		{"record", plain, true, tomb{}},
		{"record carrying a tombstone", carrying, true, want},
		{"tombstone alone", encodeTomb(want), false, want},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, past, err := decodeValue(tc.v)
			if err != nil || (got != nil) != tc.record || past != tc.past {
				t.Fatalf("decoded %+v, %+v, %v; want record %v, tombstone %+v", got, past, err, tc.record, tc.past)
			}
			if got != nil && (got.ID != r.ID || string(got.Body) != "done" || got.ExpireAt != r.ExpireAt) {
				t.Fatalf("decoded %+v", got.Record)
			}
		})
	}
	for _, bad := range [][]byte{{opTomb}, encodeTomb(tomb{}), append(encodeTomb(want), 0), append(carrying, 0)} {
		if r, past, err := decodeValue(bad); err == nil {
			t.Errorf("decodeValue(%q) = %+v, %+v; want an error", bad, r, past)
		}
	}
}

// TestRecordCodecToolCall: a record's tool call is a section after the
// tombstone's, with or without a tombstone, and a record without one is
// encoded as before records kept tool calls.
func TestRecordCodecToolCall(t *testing.T) {
	r := &rec{Record: store.Record{
		ID: "0123456789abcdef0123456789abcdef", Route: "r", Operation: "r", State: store.StateUnknown,
		Token: "tok", StartedAt: time.UnixMilli(1_700_000_000_000), Attempts: 1, Executions: 1, Unknowns: 1,
	}, ExpireAt: 1_700_000_100_000}
	plain := encodeRecord(r, tomb{})
	call := &store.ToolCall{Tool: "create_deal", Arguments: `{"event_id":"evt_1","password":"[redacted]"}`}
	with := *r
	with.Call = call
	past := tomb{until: 1_700_003_700_000, completedAt: 1_699_000_000_000, status: 200, reason: store.ReasonOperator}
	for _, tc := range []struct {
		name string
		t    tomb
	}{{"without a tombstone", tomb{}}, {"with a tombstone", past}} {
		t.Run(tc.name, func(t *testing.T) {
			v := encodeRecord(&with, tc.t)
			if !bytes.HasPrefix(v, plain) {
				t.Fatalf("the tool call is not a trailing section: %q, %q", plain, v)
			}
			got, gotPast, err := decodeValue(v)
			if err != nil || gotPast != tc.t || got.Call == nil || *got.Call != *call || got.Unknowns != 1 {
				t.Fatalf("decoded %+v, %+v, %v", got, gotPast, err)
			}
			if old, oldPast, err := decodeValue(encodeRecord(r, tc.t)); err != nil || old.Call != nil || oldPast != tc.t {
				t.Fatalf("without a tool call: decoded %+v, %+v, %v", old, oldPast, err)
			}
		})
	}
}
