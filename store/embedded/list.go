package embedded

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

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
//
// A state is walked through its state index; completed records, which
// have none (see indexed), through the record keys, which are in the same
// order.
func (e *Engine) List(ctx context.Context, f store.ListFilter) (store.ListPage, error) {
	states, limit, err := store.CheckList(f)
	if err != nil {
		return store.ListPage{}, err
	}
	first, from := 0, ""
	if f.Cursor != "" {
		if first, from, err = store.DecodeCursor(f.Cursor, cursorVersion, states); err != nil {
			return store.ListPage{}, err
		}
	}
	if err := e.enter(); err != nil {
		return store.ListPage{}, err
	}
	defer e.leave()
	l := lister{e: e, route: f.Route, limit: limit, now: e.now(), page: store.ListPage{Records: []*store.Record{}}}
	for i := first; i < len(states) && l.page.NextCursor == ""; i++ {
		if i > first {
			from = ""
		}
		if err := l.walk(states[i], from); err != nil {
			return store.ListPage{}, err
		}
	}
	return l.page, nil
}

// lister is one List call under way.
type lister struct {
	e     *Engine
	route string
	limit int
	now   int64
	page  store.ListPage
	// scanned counts the records of the listed states looked at; passed
	// the record keys of other states the walk of completed records went
	// by.
	scanned, passed int
}

// walk lists the records in state st from record id from on, until the
// page is full.
func (l *lister) walk(st store.State, from string) error {
	lower, upper := recordKey(from), []byte{kindRecord + 1}
	if indexed(st) {
		lower, upper = indexKey(stateIdx(st), from), indexKey(stateIdx(st)+1, "")
	}
	it, err := l.e.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return l.e.readErr(err)
	}
	defer it.Close()
	for it.First(); it.Valid() && l.page.NextCursor == ""; it.Next() {
		id := string(it.Key()[len(lower)-len(from):])
		r, err := l.record(it, st, id)
		switch {
		case err != nil:
			return err
		case r != nil:
			l.visit(st, id, r)
		case !indexed(st):
			// A record key of another state (or expired): bounded.
			if l.passed++; l.passed >= listMaxScan {
				l.page.NextCursor = store.EncodeCursor(cursorVersion, st, id)
			}
		}
	}
	if err := it.Error(); err != nil {
		return l.e.readErr(err)
	}
	return nil
}

// record is the live record in state st that the walk is at, or nil (an
// index key left by a record that expired, not yet swept, or changed
// meanwhile; a record key of another state). A state index key is
// followed to its record; a record key's value is the record, read once.
func (l *lister) record(it *pebble.Iterator, st store.State, id string) (*rec, error) {
	var r *rec
	if indexed(st) {
		var err error
		if r, err = l.e.read(id); err != nil {
			return nil, fmt.Errorf("store: list: %w", err)
		}
	} else {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, l.e.readErr(err)
		}
		if r, _, err = decodeValue(v); err != nil {
			return nil, fmt.Errorf("store: list: embedded store %s: record %s does not decode: %w", l.e.dir, id, err)
		}
	}
	if r == nil || r.ExpireAt <= l.now || r.State != st {
		return nil, nil
	}
	if !indexed(st) {
		if _, err := l.e.getAttempts(r); err != nil {
			return nil, fmt.Errorf("store: list: %w", err)
		}
	}
	return r, nil
}

// visit adds r to the page, or ends the page with a cursor at r.
func (l *lister) visit(st store.State, id string, r *rec) {
	if len(l.page.Records) == l.limit || l.scanned >= l.limit+listMaxScan {
		if l.route == "" || r.Route == l.route || l.scanned >= l.limit+listMaxScan {
			l.page.NextCursor = store.EncodeCursor(cursorVersion, st, id)
			return
		}
		l.scanned++
		return
	}
	l.scanned++
	if l.route != "" && r.Route != l.route {
		return
	}
	l.page.Records = append(l.page.Records, r.Listed())
}
