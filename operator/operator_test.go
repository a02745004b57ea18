package operator

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store"
)

// counted counts the actions that reach the live handlers.
type counted struct{ verifies, runs int }

func (c *counted) CheckOutcome(_ context.Context, rec *store.Record, _ store.Action) (*store.Record, string, error) {
	c.verifies++
	return rec, store.VerdictInconclusive, nil
}

func (c *counted) Run(_ context.Context, rec *store.Record, _ store.Action) (*store.Record, int, error) {
	c.runs++
	return rec, http.StatusCreated, nil
}

// TestActionsChecked: an action the service or the store would refuse is
// refused before it reaches the live handler (no lookup, no re-drive);
// the others reach it.
func TestActionsChecked(t *testing.T) {
	t.Parallel()
	acts := &counted{}
	tgt := Target{Rec: &store.Record{ID: strings.Repeat("a", 32), Route: "deals"}, Store: LiveStore{Tag: "t", Actions: acts}}
	s := New(func() []LiveStore { return []LiveStore{tgt.Store} })
	ctx := context.Background()
	long := store.Action{Actor: "admin-api", Reason: strings.Repeat("r", store.MaxReasonLen+1)}
	if _, _, err := s.CheckOutcome(ctx, tgt, long); !errors.Is(err, store.ErrInvalidArgument) || Status(err) != http.StatusBadRequest {
		t.Errorf("verify with a reason too long: %v (status %d), want a 400", err, Status(err))
	}
	if _, _, err := s.Run(ctx, tgt, store.Action{Actor: "admin-api"}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("run without a reason: %v, want an invalid argument", err)
	}
	if acts.verifies != 0 || acts.runs != 0 {
		t.Fatalf("refused actions reached the handler: %+v", acts)
	}
	ok := store.Action{Actor: "admin-api", Reason: "the CRM is back"}
	if _, verdict, err := s.CheckOutcome(ctx, tgt, ok); err != nil || verdict != store.VerdictInconclusive {
		t.Errorf("verify: %q, %v", verdict, err)
	}
	if _, status, err := s.Run(ctx, tgt, ok); err != nil || status != http.StatusCreated {
		t.Errorf("run: %d, %v", status, err)
	}
	if acts.verifies != 1 || acts.runs != 1 {
		t.Errorf("actions reaching the handler: %+v, want one of each", acts)
	}
	none := tgt
	none.Store.Actions = nil
	if _, _, err := s.CheckOutcome(ctx, none, ok); !errors.Is(err, ErrNoVerify) || Status(err) != http.StatusConflict {
		t.Errorf("verify without a live handler: %v, want ErrNoVerify (409)", err)
	}
}
