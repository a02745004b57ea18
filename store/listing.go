package store

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
