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
	full := encodeRecord(r)
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
			got, err := decodeRecord(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if got.Unknowns != tc.wantUnknowns || got.NotDone != 3 || !bytes.Equal(got.Request, r.Request) ||
				len(got.Answers) != 1 || got.Answers[0].Status != 502 || got.Reason != store.ReasonUnknownReleased {
				t.Fatalf("decoded %+v", got.Record)
			}
		})
	}
}
