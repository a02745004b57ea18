package store

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
)

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListFilter selects the records List returns.
type ListFilter struct {
	// State selects one state (StateInFlight, StateCompleted, StateUnknown
	// or StateReleased; "unknown" is accepted for StateUnknown); "" lists
	// every state.
	State State
	// Route selects one route by name; "" lists every route.
	Route string
	// Limit is the page size: default 100 (when ≤ 0), at most 1000 (larger
	// values are lowered to 1000).
	Limit int
	// Cursor continues a listing: "" for the first page, else the previous
	// page's NextCursor (with the same State).
	Cursor string
}

// ListPage is one page of List.
type ListPage struct {
	// Records are the page's records without Body, Header, Token and
	// Audit.
	Records []*Record
	// NextCursor continues the listing; "" when there is nothing more.
	NextCursor string
}

// CheckList validates a List's filter and returns the states it walks,
// in index order, and its page size.
func CheckList(f ListFilter) ([]State, int, error) {
	states := IndexStates()
	if f.State != "" {
		st := StoredState(f.State)
		if st == "" {
			return nil, 0, fmt.Errorf("%w: state %q is not one of in_flight, completed, outcome_unknown, released",
				ErrInvalidArgument, f.State)
		}
		states = []State{states[slices.IndexFunc(states, func(s State) bool { return StoredState(s) == st })]}
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	return states, min(limit, MaxListLimit), nil
}

// Listed is the record as List returns it: without Token, Header, Body
// and Audit.
func (s *Stored) Listed() *Record {
	v := s.Record
	v.Token, v.Header, v.Body, v.Audit = "", nil, nil, nil
	return &v
}

// EncodeCursor is a Go engine's List cursor: base64url("<version>
// <state> <id>"), the first record not yet returned.
func EncodeCursor(version string, st State, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(version + " " + StoredState(st) + " " + id))
}

// DecodeCursor returns the position in states and the record id that
// cursor c (made by EncodeCursor with version) starts from.
func DecodeCursor(c, version string, states []State) (int, string, error) {
	bad := func(why string) (int, string, error) {
		return 0, "", fmt.Errorf("%w: cursor %q: %s", ErrInvalidArgument, c, why)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return bad("not a cursor of this store")
	}
	parts := strings.Split(string(raw), " ")
	if len(parts) != 3 || parts[0] != version {
		return bad("not a cursor of this store")
	}
	i := slices.IndexFunc(states, func(s State) bool { return StoredState(s) == parts[1] })
	if i < 0 {
		return bad("made for another state filter")
	}
	if !ValidID(parts[2]) {
		return bad("bad position")
	}
	return i, parts[2], nil
}

// indexStates are the states a listing walks, in listing order.
var indexStates = [...]State{StateInFlight, StateCompleted, StateUnknown, StateReleased}

// StoredState is the short form of a state as kept in indexes and cursors
// ("in_flight", "completed", "unknown", "released"); "" for an unknown
// state. It accepts "unknown" for StateUnknown.
func StoredState(st State) string {
	switch st {
	case StateInFlight:
		return "in_flight"
	case StateCompleted:
		return "completed"
	case StateUnknown, "unknown":
		return "unknown"
	case StateReleased:
		return "released"
	}
	return ""
}

// IndexStates are the four record states in listing order.
func IndexStates() []State { return indexStates[:] }
