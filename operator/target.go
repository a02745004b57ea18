package operator

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// RecordStore is what the operator service needs of a record store: the
// operator part of store.Engine.
type RecordStore interface {
	Get(ctx context.Context, id string) (*store.Record, error)
	List(ctx context.Context, f store.ListFilter) (store.ListPage, error)
	OperatorRelease(ctx context.Context, id string, act store.Action, ttl time.Duration) (*store.Record, error)
	OperatorComplete(ctx context.Context, id string, res store.Result, act store.Action, ttl time.Duration) (*store.Record, error)
}

// Actions are the operator actions that need the live handler of a
// record's route, not only its store: a verification check with the
// route's verifier, and a re-drive through the route's handler chain.
// The idempotency handler implements them for the stores it lists.
type Actions interface {
	// CheckOutcome runs one verification check of held record rec now,
	// on act's word (the upstream asked whether the operation
	// happened), and returns the record after it and the verdict.
	// ErrNoVerify when its route has no verify rule in the running
	// config.
	CheckOutcome(ctx context.Context, rec *store.Record, act store.Action) (*store.Record, string, error)
	// Run re-drives rec once on act's word and returns the record after
	// the run and the upstream's status.
	Run(ctx context.Context, rec *store.Record, act store.Action) (*store.Record, int, error)
}

// LiveStore is one record store that the idempotency handlers of the
// running config (or, during a reload, of the old and the new one) use.
type LiveStore struct {
	// Tag names the store while it is in use: a salted hash of its
	// configuration, never its address or credentials.
	Tag string
	// Store is the store itself.
	Store RecordStore
	// Routes are the routes whose records it keeps, by name; the newest
	// config's route wins.
	Routes map[string]config.Resolved
	// Actions runs checks and re-drives with the live handlers of the
	// store's routes; nil: none can run.
	Actions Actions
}

// Target is a record as an operator found it: the record, the live store
// that holds it, and its route in the running config (Known false when
// the route is not configured any more). It is the one view of a record
// and its route's limits that every action and front end uses.
type Target struct {
	Rec   *store.Record
	Store LiveStore
	Route config.Resolved
	Known bool
}

// target is rec, found in s, with its route.
func (s LiveStore) target(rec *store.Record) Target {
	rt, known := s.Routes[rec.Route]
	return Target{Rec: rec, Store: s, Route: rt, Known: known}
}

// TTL is how long the record lives once resolved: its route's ttl, or
// the default when the route is not configured any more.
func (t Target) TTL() time.Duration {
	if t.Known && t.Route.TTL > 0 {
		return t.Route.TTL
	}
	return store.DefaultTTL
}

// Redactor hides credentials in the record's stored body: the built-in
// names and its route's redact_fields (see RouteRedactor).
func (t Target) Redactor() Redactor {
	if !t.Known {
		return RouteRedactor(nil)
	}
	return RouteRedactor(&t.Route)
}

// RouteRedactor is the redaction of the stored bodies of route rt's
// records: the built-in credential names and its redact_fields, and its
// show_unparsed_bodies. A record whose route is not configured (nil) gets
// the built-in names, and bodies that cannot be redacted field by field
// only as size and digest.
func RouteRedactor(rt *config.Resolved) Redactor {
	if rt == nil {
		return NewRedactor(nil)
	}
	return NewRedactor(rt.RedactFields).WithUnparsed(rt.ShowUnparsedBodies)
}

// FirstHolding asks the stores 0..n-1 (at(i)) in turn for record id:
// the first that has it wins, and its index is returned. A store error is
// returned only when no store has the record; -1 and no error when none
// does.
func FirstHolding(ctx context.Context, id string, n int, at func(i int) RecordStore) (*store.Record, int, error) {
	var firstErr error
	for i := range n {
		rec, err := at(i).Get(ctx, id)
		switch {
		case err != nil:
			// Another store may hold it: report the failure only when
			// none does.
			if firstErr == nil {
				firstErr = err
			}
		case rec != nil:
			return rec, i, nil
		}
	}
	return nil, -1, firstErr
}

// ValidRecordID accepts what keying.KeyID makes: 32 lowercase hex
// characters.
func ValidRecordID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
