package operator

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/store"
)

// Service is the one operator service. Its stores come from the running
// config's idempotency handlers (storepool.LiveStores); a front end
// builds one per request, or once, over the same source.
type Service struct {
	stores func() []LiveStore
}

// New returns the operator service over the live stores that stores
// lists.
func New(stores func() []LiveStore) *Service {
	return &Service{stores: stores}
}

// Stores lists the live stores, in a stable order.
func (s *Service) Stores() []LiveStore { return s.stores() }

// Find looks record id up in every live store; the first that has it
// wins. Errors: store.ErrInvalidID (not a record id), store.ErrNotFound,
// or the failure of a store when none has the record.
func (s *Service) Find(ctx context.Context, id string) (Target, error) {
	if !ValidRecordID(id) {
		return Target{}, fmt.Errorf("%w: %q is not a record id (32 lowercase hex characters)", store.ErrInvalidID, id)
	}
	live := s.stores()
	rec, i, err := FirstHolding(ctx, id, len(live), func(i int) RecordStore { return live[i].Store })
	switch {
	case rec != nil:
		return live[i].target(rec), nil
	case err != nil:
		return Target{}, err
	}
	return Target{}, fmt.Errorf("%w: record %s", store.ErrNotFound, id)
}

// Release releases the record on act's word: the next retry executes.
// With a store.ErrConflict (a live call, or a verification check holding
// the record: store.ErrCheckRunning) the record is returned as it is.
func (s *Service) Release(ctx context.Context, t Target, act store.Action) (*store.Record, error) {
	return t.Store.Store.OperatorRelease(ctx, t.Rec.ID, act, t.TTL())
}

// Complete checks c against the record's route and records it as the
// operation's outcome on act's word: retries replay it. It returns the
// record after it and the result stored.
func (s *Service) Complete(ctx context.Context, t Target, c Completion, act store.Action) (*store.Record, store.Result, error) {
	res, err := c.Result(t)
	if err != nil {
		return nil, res, err
	}
	rec, err := t.Store.Store.OperatorComplete(ctx, t.Rec.ID, res, act, t.TTL())
	return rec, res, err
}

// CheckOutcome runs one verification check of the held record now, on
// act's word: it asks the upstream, with the route's verify rule in the
// running config, whether the operation happened, and returns the record
// after it and the verdict. The check and act are kept on the
// record. Errors: store.ErrNotFound, store.ErrConflict (not held, no
// check, a check running, resolved meanwhile), ErrNoVerify,
// store.ErrInvalidArgument (act), or the store's failure.
func (s *Service) CheckOutcome(ctx context.Context, t Target, act store.Action) (*store.Record, string, error) {
	// Refused before the lookup: the check would ask the upstream first
	// and keep act only at its end.
	if err := act.Validate(); err != nil {
		return t.Rec, "", err
	}
	if t.Store.Actions == nil {
		return t.Rec, "", fmt.Errorf("%w: route %s", ErrNoVerify, t.Rec.Route)
	}
	return t.Store.Actions.CheckOutcome(ctx, t.Rec, act)
}

// Run re-drives the record on act's word, which must give a reason, and
// returns the record after the run and the upstream's status. Errors:
// store.ErrNotFound, store.ErrConflict (see store.RedriveRefusal; also a
// route no longer configured or without a kept request that opens),
// ErrNoChain, a breaker's refusal, store.ErrInvalidArgument (act), or the
// store's failure.
func (s *Service) Run(ctx context.Context, t Target, act store.Action) (*store.Record, int, error) {
	if act.Reason == "" {
		return nil, 0, Invalid("a reason is required to run an operation again")
	}
	if t.Store.Actions == nil {
		return t.Rec, 0, fmt.Errorf("%w: route %s is not configured with keep_request on this gateway", store.ErrConflict, t.Rec.Route)
	}
	return t.Store.Actions.Run(ctx, t.Rec, act)
}
