package operator

import (
	"context"
	"errors"
	"testing"

	"github.com/idemgate/idemgate/store"
)

// getter is a RecordStore whose Get answers rec, err.
type getter struct {
	RecordStore
	rec *store.Record
	err error
}

func (g getter) Get(context.Context, string) (*store.Record, error) { return g.rec, g.err }

// TestFirstHolding: the first store that has the record wins; a store
// error counts only when no store has it.
func TestFirstHolding(t *testing.T) {
	t.Parallel()
	rec, down := &store.Record{ID: "r"}, errors.New("down")
	for _, tc := range []struct {
		name    string
		stores  []getter
		wantIdx int
		wantErr error
	}{
		{"none", nil, -1, nil},
		{"absent everywhere", []getter{{}, {}}, -1, nil},
		{"second has it", []getter{{}, {rec: rec}}, 1, nil},
		{"an error, then found", []getter{{err: down}, {rec: rec}}, 1, nil},
		{"an error, not found", []getter{{}, {err: down}}, -1, down},
	} {
		got, i, err := FirstHolding(context.Background(), "r", len(tc.stores), func(i int) RecordStore { return tc.stores[i] })
		if i != tc.wantIdx || !errors.Is(err, tc.wantErr) || (i >= 0) != (got == rec) {
			t.Errorf("%s: %v, %d, %v; want index %d, error %v", tc.name, got, i, err, tc.wantIdx, tc.wantErr)
		}
	}
}
