package postgres

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/store"
)

// cursorVersion starts this engine's cursors: base64url("p1 <state>
// <id>"), the first record not yet returned.
const cursorVersion = "p1"

// List pages through the records of one state (or every state, state by
// state), optionally of one route, in order of record id within a state,
// from the state index. Following NextCursor until it is "" visits every
// record that exists throughout the walk exactly once, as long as
// records do not change state meanwhile. Records carry no Token, Header,
// Body or Audit.
func (e *Engine) List(ctx context.Context, f store.ListFilter) (store.ListPage, error) {
	states, limit, err := store.CheckList(f)
	if err != nil {
		return store.ListPage{}, err
	}
	from, after := 0, ""
	if f.Cursor != "" {
		i, id, err := store.DecodeCursor(f.Cursor, cursorVersion, states)
		if err != nil {
			return store.ListPage{}, err
		}
		from, after = i, id
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	page := store.ListPage{Records: []*store.Record{}}
	q := e.sql.list
	for i := from; i < len(states); i++ {
		want := limit - len(page.Records) + 1 // one more says where the next page starts
		rows, err := e.pool.Query(ctx, q, store.StoredState(states[i]), after, f.Route, want)
		if err != nil {
			return store.ListPage{}, fmt.Errorf("store: postgres: list: %w", err)
		}
		for rows.Next() {
			r, err := scanRec(rows)
			e.counts.view(r)
			if err != nil {
				rows.Close()
				return store.ListPage{}, fmt.Errorf("store: postgres: list: %w", err)
			}
			if len(page.Records) == limit {
				page.NextCursor = store.EncodeCursor(cursorVersion, states[i], r.ID)
				break
			}
			page.Records = append(page.Records, r.Listed())
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return store.ListPage{}, fmt.Errorf("store: postgres: list: %w", err)
		}
		if page.NextCursor != "" {
			break
		}
		after = ""
	}
	return page, nil
}
