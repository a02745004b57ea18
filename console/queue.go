package console

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
)

// queuePageSize is how many records one page of the queue shows.
const queuePageSize = 50

// summaryLimit is how many records of each state the per-route summary
// reads from each store (one List page: the state indexes, never a scan).
const summaryLimit = store.MaxListLimit

// queueStates is the order of the queue: held records first, then those
// in flight, released and completed.
var queueStates = []store.State{store.StateUnknown, store.StateInFlight, store.StateReleased, store.StateCompleted}

// option is one choice of a filter.
type option struct {
	Value, Label string
	Selected     bool
}

// queueRow is one record in the queue.
type queueRow struct {
	ID         string
	Short      string
	Route      string
	State      stateInfo
	Started    time.Time
	Age        string
	Attempts   int64
	Executions int64
	Reason     string
	Advice     advice
	Checks     string // the verification checks and the next one
	Owner      string // who resolves the route's held operations
	Tool       string // the tool an agent called (a route with protocol: mcp)
}

// routeSummary is one route's line of the summary.
type routeSummary struct {
	Route      string
	Records    int64
	Attempts   int64
	Executions int64
	// MultiExec counts records whose operation ran more than once.
	MultiExec  int64
	Held       int64
	InFlight   int64
	OldestHeld time.Time
	OldestAge  string
	// Mode is the route's mode (enforce or observe); Observed what
	// enforce would have done with the requests it forwarded while
	// observing, counted by this gateway.
	Mode     string
	Observed metrics.ObservedCounts
}

// queuePage is the data of the queue page.
type queuePage struct {
	*pageContext
	States         []option
	Routes         []option
	State, Route   string
	Rows           []queueRow
	Summary        []routeSummary
	SummaryPartial bool
	NoStores       bool
	// Next is the query of the next page; "" on the last page.
	Next string
	// Paged is true past the first page; First is the query of the
	// first page.
	Paged        bool
	First        string
	SummaryLimit int
	Error        string
}

// serveQueue answers GET /: the summary and one page of records.
func (c *Console) serveQueue(w http.ResponseWriter, r *http.Request, p *pageContext) {
	q := r.URL.Query()
	page := queuePage{pageContext: p, State: q.Get("state"), Route: q.Get("route"), Paged: q.Get("cursor") != "",
		SummaryLimit: summaryLimit}
	states := queueStates
	if page.State != "" {
		st := store.State(page.State)
		if !slices.Contains(queueStates, st) {
			p.renderError(w, http.StatusBadRequest, "Unknown state",
				"The state filter must be one of outcome_unknown, in_flight, released and completed.")
			return
		}
		states = []store.State{st}
	}
	if len(page.Route) > 128 {
		p.renderError(w, http.StatusBadRequest, "Route name too long", "No route has a name that long.")
		return
	}

	stores := c.stores()
	page.NoStores = len(stores) == 0
	page.States = append(page.States, option{"", "All states (held first)", page.State == ""})
	for _, st := range queueStates {
		page.States = append(page.States, option{string(st), stateTag(st).Long, page.State == string(st)})
	}

	status := http.StatusOK
	summary, partial, err := summarize(r, stores)
	if err == nil {
		page.Summary, page.SummaryPartial = summary, partial
		page.Rows, page.Next, err = listPage(r, stores, states, page.Route, q.Get("cursor"), p.Now)
	}
	if err != nil {
		if ce, ok := err.(cursorError); ok {
			p.renderError(w, http.StatusBadRequest, "This page no longer exists", ce.msg)
			return
		}
		c.logger.Error("console: listing records", zap.Error(err))
		page.Error = "A record store could not be read; the list may be incomplete. Try again in a moment."
		status = http.StatusServiceUnavailable
	}
	routes := map[string]bool{}
	for _, s := range stores {
		for name := range s.Routes {
			routes[name] = true
		}
	}
	for _, sum := range page.Summary {
		routes[sum.Route] = true
	}
	names := make([]string, 0, len(routes))
	for name := range routes {
		names = append(names, name)
	}
	slices.Sort(names)
	page.Routes = append(page.Routes, option{"", "All routes", page.Route == ""})
	for _, name := range names {
		page.Routes = append(page.Routes, option{name, name, page.Route == name})
	}
	filter := url.Values{}
	if page.State != "" {
		filter.Set("state", page.State)
	}
	if page.Route != "" {
		filter.Set("route", page.Route)
	}
	page.First = "?" + filter.Encode()
	if page.Next != "" {
		filter.Set("cursor", page.Next)
		page.Next = "?" + filter.Encode()
	}
	p.render(w, status, "queue", page)
}

// cursorError is a cursor that cannot be followed.
type cursorError struct{ msg string }

func (e cursorError) Error() string { return e.msg }

// listPage reads one page of the queue: the states in order, each over
// every store, from the given cursor ("state.storetag.storecursor").
// Within the page, records are ordered by state (held first) and then
// oldest first. It returns the rows and the next cursor ("" at the end).
func listPage(r *http.Request, stores []operator.LiveStore, states []store.State, route, cursor string,
	now time.Time) ([]queueRow, string, error) {
	si, ti, inner := 0, 0, ""
	if cursor != "" {
		parts := strings.SplitN(cursor, ".", 3)
		if len(parts) != 3 {
			return nil, "", cursorError{"The page link is not valid. Start again from the first page."}
		}
		si = slices.Index(states, store.State(parts[0]))
		ti = slices.IndexFunc(stores, func(s operator.LiveStore) bool { return s.Tag == parts[1] })
		if si < 0 || ti < 0 {
			return nil, "", cursorError{"The configuration changed since this page link was made. Start again from the first page."}
		}
		inner = parts[2]
	}
	var (
		recs []*store.Record
		from []operator.RecordStore // the store of each record
	)
	next := ""
walk:
	for ; si < len(states); si++ {
		for ; ti < len(stores); ti++ {
			page, err := stores[ti].Store.List(r.Context(), store.ListFilter{
				State: states[si], Route: route, Limit: queuePageSize - len(recs), Cursor: inner,
			})
			if err != nil {
				return nil, "", err
			}
			inner = ""
			recs = append(recs, page.Records...)
			for range page.Records {
				from = append(from, stores[ti].Store)
			}
			if page.NextCursor != "" {
				next = string(states[si]) + "." + stores[ti].Tag + "." + page.NextCursor
				break walk
			}
			if len(recs) >= queuePageSize {
				switch {
				case ti+1 < len(stores):
					next = string(states[si]) + "." + stores[ti+1].Tag + "."
				case si+1 < len(states) && len(stores) > 0:
					next = string(states[si+1]) + "." + stores[0].Tag + "."
				}
				break walk
			}
		}
		ti = 0
	}
	// Listings carry no audit trail. A record whose operation ran more
	// than once is read in full (rare), so that the advice can tell
	// operator releases from duplicates.
	for i, rec := range recs {
		if rec.State != store.StateCompleted || rec.Executions < 2 {
			continue
		}
		full, err := from[i].Get(r.Context(), rec.ID)
		if err != nil {
			return nil, "", err
		}
		if full != nil && full.State == rec.State {
			rec.Audit = full.Audit
			if rec.Audit == nil {
				rec.Audit = []store.AuditEntry{}
			}
		}
	}
	rank := func(st store.State) int { return slices.Index(queueStates, st) }
	slices.SortStableFunc(recs, func(a, b *store.Record) int {
		return cmp.Or(cmp.Compare(rank(a.State), rank(b.State)), a.StartedAt.Compare(b.StartedAt))
	})
	owners := ownersOf(stores)
	rows := make([]queueRow, len(recs))
	for i, rec := range recs {
		rows[i] = queueRow{
			ID:         rec.ID,
			Short:      shortID(rec.ID),
			Route:      rec.Route,
			State:      stateTag(rec.Class()),
			Owner:      owners[rec.Route],
			Started:    rec.StartedAt,
			Age:        age(rec.StartedAt, now),
			Attempts:   rec.Attempts,
			Executions: rec.Executions,
			Reason:     reasonText(rec),
			Advice:     adviceFor(rec, now),
			Checks:     queueChecks(rec),
		}
		if rec.Call != nil {
			rows[i].Tool = rec.Call.Tool
		}
	}
	return rows, next, nil
}

// summarize counts, per route, the records that the first summaryLimit
// entries of every state index of every store hold. partial is true when
// some index has more.
func summarize(r *http.Request, stores []operator.LiveStore) (out []routeSummary, partial bool, err error) {
	byRoute := map[string]*routeSummary{}
	get := func(route string) *routeSummary {
		s := byRoute[route]
		if s == nil {
			s = &routeSummary{Route: route}
			byRoute[route] = s
		}
		return s
	}
	for _, ls := range stores {
		for name, rt := range ls.Routes {
			get(name).Mode = string(rt.Mode)
		}
		for _, st := range queueStates {
			page, err := ls.Store.List(r.Context(), store.ListFilter{State: st, Limit: summaryLimit})
			if err != nil {
				return nil, false, err
			}
			partial = partial || page.NextCursor != ""
			for _, rec := range page.Records {
				s := get(rec.Route)
				s.Records++
				s.Attempts += rec.Attempts
				s.Executions += rec.Executions
				if rec.Executions > 1 {
					s.MultiExec++
				}
				switch rec.State {
				case store.StateUnknown:
					s.Held++
					if s.OldestHeld.IsZero() || rec.StartedAt.Before(s.OldestHeld) {
						s.OldestHeld = rec.StartedAt
					}
				case store.StateInFlight:
					s.InFlight++
				}
			}
		}
	}
	now := time.Now()
	for _, s := range byRoute {
		s.OldestAge = age(s.OldestHeld, now)
		s.Observed = metrics.Observed(s.Route)
		out = append(out, *s)
	}
	// Routes with held records first, the longest waiting first.
	slices.SortFunc(out, func(a, b routeSummary) int {
		if (a.Held > 0) != (b.Held > 0) {
			if a.Held > 0 {
				return -1
			}
			return 1
		}
		return cmp.Or(a.OldestHeld.Compare(b.OldestHeld), strings.Compare(a.Route, b.Route))
	})
	return out, partial, nil
}

// shortID is the part of a record id shown in lists.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12] + "…"
	}
	return id
}
