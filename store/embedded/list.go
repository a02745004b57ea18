package embedded

import (
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

// listKey orders the state index: by state (store.IndexStates order),
// then by record id.
type listKey struct {
	state int
	id    string
}

// listMaxScan bounds the records one List call examines beyond Limit
// (records skipped by the route filter): a page may then be short, with a
// NextCursor to go on from, as on Redis.
const listMaxScan = 10000

// cursorVersion starts this engine's cursors: base64url("l1 <state> <id>"),
// the first record not yet returned.
const cursorVersion = "l1"

// List pages through the records of one state (or every state, state by
// state), optionally of one route, in order of record id within a state.
// Following NextCursor until it is "" visits every record that exists
// throughout the walk exactly once, as long as records do not change
// state meanwhile. Records carry no Token, Header or Body.
func (e *Engine) List(ctx context.Context, f store.ListFilter) (store.ListPage, error) {
	states, limit, err := store.CheckList(f)
	if err != nil {
		return store.ListPage{}, err
	}
	start := listKey{state: stateIdx(states[0])}
	if f.Cursor != "" {
		i, id, err := store.DecodeCursor(f.Cursor, cursorVersion, states)
		if err != nil {
			return store.ListPage{}, err
		}
		start = listKey{state: stateIdx(states[i]), id: id}
	}
	allowed := func(k listKey) bool {
		return slices.ContainsFunc(states, func(s store.State) bool { return stateIdx(s) == k.state })
	}

	if err := e.enter(); err != nil {
		return store.ListPage{}, err
	}
	defer e.leave()
	it, err := e.db.NewIter(&pebble.IterOptions{
		LowerBound: indexKey(start.state, start.id),
		UpperBound: []byte{kindIndex + 1},
	})
	if err != nil {
		return store.ListPage{}, e.readErr(err)
	}
	defer it.Close()
	now := e.now()
	page := store.ListPage{Records: []*store.Record{}}
	scanned := 0
	for it.First(); it.Valid(); it.Next() {
		key := it.Key()
		k := listKey{state: int(key[1]), id: string(key[2:])}
		if !allowed(k) {
			continue
		}
		r, err := e.read(k.id)
		if err != nil {
			return store.ListPage{}, fmt.Errorf("store: list: %w", err)
		}
		if r == nil || r.ExpireAt <= now || stateIdx(r.State) != k.state {
			continue // expired, not yet swept; or changed meanwhile
		}
		if len(page.Records) == limit || scanned >= limit+listMaxScan {
			if f.Route == "" || r.Route == f.Route || scanned >= limit+listMaxScan {
				page.NextCursor = store.EncodeCursor(cursorVersion, store.IndexStates()[k.state], k.id)
				break
			}
			scanned++
			continue
		}
		scanned++
		if f.Route != "" && r.Route != f.Route {
			continue
		}
		page.Records = append(page.Records, r.Listed())
	}
	if err := it.Error(); err != nil {
		return store.ListPage{}, e.readErr(err)
	}
	return page, nil
}
