package postgres

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

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
	states := store.IndexStates()
	if f.State != "" {
		st := store.StoredState(f.State)
		if st == "" {
			return store.ListPage{}, fmt.Errorf("%w: state %q is not one of in_flight, completed, outcome_unknown, released",
				store.ErrInvalidArgument, f.State)
		}
		states = []store.State{stateOf(st)}
	}
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	limit = min(limit, store.MaxListLimit)
	from, after := 0, ""
	if f.Cursor != "" {
		i, id, err := decodeCursor(f.Cursor, states)
		if err != nil {
			return store.ListPage{}, err
		}
		from, after = i, id
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	page := store.ListPage{Records: []*store.Record{}}
	q := "SELECT " + recCols() + " FROM " + e.sql.records +
		" WHERE state = $1 AND id >= $2 AND expire_at > " + nowSQL + " AND ($3 = '' OR route = $3) ORDER BY id LIMIT $4"
	for i := from; i < len(states); i++ {
		want := limit - len(page.Records) + 1 // one more says where the next page starts
		rows, err := e.pool.Query(ctx, q, store.StoredState(states[i]), after, f.Route, want)
		if err != nil {
			return store.ListPage{}, fmt.Errorf("store: postgres: list: %w", err)
		}
		for rows.Next() {
			r, err := scanRec(rows)
			if err != nil {
				rows.Close()
				return store.ListPage{}, fmt.Errorf("store: postgres: list: %w", err)
			}
			if len(page.Records) == limit {
				page.NextCursor = encodeCursor(states[i], r.ID)
				break
			}
			v := r.Record
			v.Token, v.Header, v.Body, v.Audit = "", nil, nil, nil
			page.Records = append(page.Records, &v)
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

func encodeCursor(st store.State, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorVersion + " " + store.StoredState(st) + " " + id))
}

// decodeCursor returns the position in states and the id a cursor starts
// from.
func decodeCursor(c string, states []store.State) (int, string, error) {
	bad := func(why string) (int, string, error) {
		return 0, "", fmt.Errorf("%w: cursor %q: %s", store.ErrInvalidArgument, c, why)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return bad("not a cursor of this store")
	}
	parts := strings.Split(string(raw), " ")
	if len(parts) != 3 || parts[0] != cursorVersion {
		return bad("not a cursor of this store")
	}
	i := slices.IndexFunc(states, func(s store.State) bool { return store.StoredState(s) == parts[1] })
	if i < 0 {
		return bad("made for another state filter")
	}
	if !store.ValidID(parts[2]) {
		return bad("bad position")
	}
	return i, parts[2], nil
}
