package caddymodule

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// RecordStore is what the operator pages need of a record store: the
// operator part of store.Engine.
type RecordStore interface {
	Get(ctx context.Context, id string) (*store.Record, error)
	List(ctx context.Context, f store.ListFilter) (store.ListPage, error)
	OperatorRelease(ctx context.Context, id string, act store.Action, ttl time.Duration) (*store.Record, error)
	OperatorComplete(ctx context.Context, id string, res store.Result, act store.Action, ttl time.Duration) (*store.Record, error)
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
}

// LiveStores returns the record stores of every idempotency handler in
// the running config, in a stable order: what the admin API sees, for the
// operator console (http.handlers.idempotency_console).
func LiveStores() []LiveStore { return stores.exported() }

// exported is o's live stores as LiveStores.
func (o *storeOwner) exported() []LiveStore {
	snap := o.live()
	out := make([]LiveStore, len(snap))
	for i, s := range snap {
		out[i] = LiveStore{Tag: s.tag, Store: s.store, Routes: make(map[string]config.Resolved, len(s.routes))}
		for name, rt := range s.routes {
			out[i].Routes[name] = rt.Resolved
		}
	}
	return out
}

// FirstHolding asks the stores 0..n-1 (at(i)) in turn for record id:
// the first that has it wins, and its index is returned. A store error is
// returned only when no store has the record; -1 and no error when none
// does. The admin API and the operator console look records up with it.
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
