package store

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// listBatch is how many state indexes one ZRANGEBYSCORE pipeline reads.
const listBatch = 8

// listMaxScan bounds the index entries one List call examines beyond
// Limit (records skipped by the route filter, stale entries): a page may
// then be short, with a NextCursor to go on from.
const listMaxScan = 10000

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

// listSummary are the fields List reads: all but the token, the headers,
// the body and the audit trail.
var listSummary = func() []string {
	var f []string
	for _, name := range fields {
		if listed(name) {
			f = append(f, name)
		}
	}
	return f
}()

func listed(field string) bool {
	return field != fToken && field != fHeader && field != fBody && field != fAudit
}

// listPos is a position in a listing: the index number (shard-major, then
// the filter's states in indexStates order) and, inside that index, the
// first entry not yet returned, as its score and its rank among the entries
// of equal score (ZRANGEBYSCORE orders equal scores by member).
type listPos struct {
	idx   int
	score int64
	tie   int64
}

type listEntry struct {
	listPos
	id string
}

// List returns one page of records from the state indexes (no SCAN): the
// records of the selected state, or of every state, optionally of one route,
// that have not expired. Records come shard by shard ("0" to "f"), within a
// shard state by state, within a state in order of expiry time. Every round
// trip is a pipeline (ZRANGEBYSCORE over several indexes, then HMGET of the
// page's records), each with its own OpTimeout deadline. The cursor is
// opaque; following NextCursor until it is "" visits every record that
// exists throughout the walk exactly once, as long as records do not change
// state meanwhile (a record that changes state moves to another index and
// may be seen twice or not at all). A page may hold fewer than Limit records
// (even none) while NextCursor is not "", when the route filter skipped many
// records. Errors wrap ErrInvalidArgument for a bad State or Cursor.
func (s *Store) List(ctx context.Context, f ListFilter) (ListPage, error) {
	states := indexStates[:]
	if f.State != "" {
		st := storedState(f.State)
		if st == "" {
			return ListPage{}, fmt.Errorf("%w: state %q is not one of in_flight, completed, outcome_unknown, released",
				ErrInvalidArgument, f.State)
		}
		states = []State{stateFromStored(st)}
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	l := &lister{s: s, states: states}
	if f.Cursor != "" {
		pos, err := l.decodeCursor(f.Cursor)
		if err != nil {
			return ListPage{}, err
		}
		l.next = pos
	}
	tctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	now, err := s.client.Time(tctx).Result()
	cancel()
	if err != nil {
		return ListPage{}, fmt.Errorf("store: list: %w", err)
	}
	l.now = now.UnixMilli()

	page := ListPage{Records: []*Record{}}
	for scanned := 0; len(page.Records) < limit && scanned < limit+listMaxScan; {
		need := limit - len(page.Records)
		if err := l.fill(ctx, need); err != nil {
			return ListPage{}, err
		}
		if len(l.queue) == 0 {
			break
		}
		take := l.queue[:min(need, len(l.queue))]
		recs, err := l.read(ctx, take)
		if err != nil {
			return ListPage{}, err
		}
		for i, r := range recs {
			// A record missing (expired, evicted) or in another state
			// than its index says (it changed state since the index was
			// read, or a stale entry) is not listed from this index.
			if r == nil || r.State != l.states[take[i].idx%len(l.states)] {
				continue
			}
			if f.Route != "" && r.Route != f.Route {
				continue
			}
			page.Records = append(page.Records, r)
		}
		l.queue = l.queue[len(take):]
		scanned += len(take)
	}
	if err := l.fill(ctx, 1); err != nil {
		return ListPage{}, err
	}
	if len(l.queue) > 0 {
		page.NextCursor = l.encodeCursor(l.queue[0].listPos)
	}
	return page, nil
}

// lister walks the indexes of one List call.
type lister struct {
	s      *Store
	states []State
	now    int64 // Redis clock, ms: entries scored at or before it have expired
	queue  []listEntry
	next   listPos // where the next ZRANGEBYSCORE starts (after queue)
}

func (l *lister) total() int { return numShards * len(l.states) }

func (l *lister) indexKey(idx int) string {
	return l.s.IndexKey(hexDigits[idx/len(l.states):idx/len(l.states)+1], l.states[idx%len(l.states)])
}

// fill reads index entries until the queue holds at least n or every index
// has been read. Each round is one pipeline over up to listBatch indexes;
// the entries of an index that may hold more than were asked for end the
// round (the later indexes' replies are dropped and read again later).
func (l *lister) fill(ctx context.Context, n int) error {
	for len(l.queue) < n && l.next.idx < l.total() {
		want := int64(n - len(l.queue))
		first, end := l.next.idx, min(l.next.idx+listBatch, l.total())
		starts := make([]listPos, 0, end-first)
		cmds := make([]*redis.ZSliceCmd, 0, end-first)
		pctx, cancel := context.WithTimeout(ctx, l.s.opTimeout)
		pipe := l.s.client.Pipeline()
		for idx := first; idx < end; idx++ {
			start := listPos{idx: idx, score: l.now + 1}
			if idx == l.next.idx && l.next.score >= start.score {
				start = l.next
			}
			starts = append(starts, start)
			cmds = append(cmds, pipe.ZRangeByScoreWithScores(pctx, l.indexKey(idx), &redis.ZRangeBy{
				Min: strconv.FormatInt(start.score, 10), Max: "+inf", Offset: start.tie, Count: want,
			}))
		}
		_, err := pipe.Exec(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("store: list: read index: %w", err)
		}
		for i, cmd := range cmds {
			zs := cmd.Val()
			prev := starts[i]
			prev.tie-- // the rank the entry before the first would have
			for _, z := range zs {
				id, _ := z.Member.(string)
				e := listEntry{listPos: listPos{idx: starts[i].idx, score: int64(z.Score)}, id: id}
				if e.score == prev.score {
					e.tie = prev.tie + 1
				}
				l.queue = append(l.queue, e)
				prev = e.listPos
			}
			if int64(len(zs)) == want {
				// This index may hold more: continue after its last entry.
				l.next = listPos{idx: prev.idx, score: prev.score, tie: prev.tie + 1}
				break
			}
			l.next = listPos{idx: starts[i].idx + 1}
		}
	}
	return nil
}

// read fetches the summary fields of the entries' records in one pipeline;
// nil for a record that no longer exists.
func (l *lister) read(ctx context.Context, entries []listEntry) ([]*Record, error) {
	pctx, cancel := context.WithTimeout(ctx, l.s.opTimeout)
	defer cancel()
	pipe := l.s.client.Pipeline()
	cmds := make([]*redis.SliceCmd, len(entries))
	for i, e := range entries {
		cmds[i] = pipe.HMGet(pctx, l.s.Key(e.id), listSummary...)
	}
	if _, err := pipe.Exec(pctx); err != nil {
		return nil, fmt.Errorf("store: list: read records: %w", err)
	}
	recs := make([]*Record, len(entries))
	v := make([]any, numFields)
	for i, cmd := range cmds {
		got := cmd.Val()
		if len(got) != len(listSummary) {
			return nil, errShortReply
		}
		j := 0
		for k, name := range fields {
			v[k] = nil
			if listed(name) {
				v[k] = got[j]
				j++
			}
		}
		r, err := decodeRecord(entries[i].id, v)
		if err != nil {
			return nil, err
		}
		recs[i] = r
	}
	return recs, nil
}

// Cursors are base64url("v1 <shard> <state> <score> <tie>"): positions name
// the shard and state rather than an index number, so that a cursor cannot
// silently mean another index under another filter.
const cursorVersion = "v1"

func (l *lister) encodeCursor(p listPos) string {
	shard := hexDigits[p.idx/len(l.states) : p.idx/len(l.states)+1]
	st := storedState(l.states[p.idx%len(l.states)])
	text := cursorVersion + " " + shard + " " + st + " " + strconv.FormatInt(p.score, 10) + " " + strconv.FormatInt(p.tie, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(text))
}

func (l *lister) decodeCursor(c string) (listPos, error) {
	bad := func(why string) (listPos, error) {
		return listPos{}, fmt.Errorf("%w: cursor %q: %s", ErrInvalidArgument, c, why)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return bad("not a cursor of this store")
	}
	parts := strings.Split(string(raw), " ")
	if len(parts) != 5 || parts[0] != cursorVersion {
		return bad("not a cursor of this store")
	}
	shard := strings.Index(hexDigits, parts[1])
	if len(parts[1]) != 1 || shard < 0 {
		return bad("bad shard")
	}
	state := -1
	for i, st := range l.states {
		if storedState(st) == parts[2] {
			state = i
		}
	}
	if state < 0 {
		return bad("made for another state filter")
	}
	score, err1 := strconv.ParseInt(parts[3], 10, 64)
	tie, err2 := strconv.ParseInt(parts[4], 10, 64)
	if err1 != nil || err2 != nil || score < 0 || tie < 0 {
		return bad("bad position")
	}
	return listPos{idx: shard*len(l.states) + state, score: score, tie: tie}, nil
}
