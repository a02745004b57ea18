package redis

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/idemgate/idemgate/store"
	goredis "github.com/redis/go-redis/v9"
)

// listBatch is how many state indexes one ZRANGEBYSCORE pipeline reads
// (a Cluster has 4096 of each state).
const listBatch = 1024

// listMaxScan bounds the index entries one List call examines beyond
// Limit (records skipped by the route filter, stale entries): a page may
// then be short, with a NextCursor to go on from.
const listMaxScan = 10000

// summaryBytes is how much of a record a listing reads at first (GETRANGE):
// enough for every field but the header and body of most records.
const summaryBytes = 4096

// listPos is a position in the index walk: the index number (shard-major,
// then the filter's indexed states in indexStates order) and, inside that
// index, the first entry not yet returned, as its score and its rank among
// the entries of equal score (ZRANGEBYSCORE orders equal scores by member).
type listPos struct {
	idx   int
	score int64
	tie   int64
}

// scanPos is a position in the walk over completed records: the master
// (in order of address), the SCAN cursor of a page, and how many of that
// page's keys were already looked at.
type scanPos struct {
	node   int
	cursor uint64
	skip   int
}

type listEntry struct {
	listPos
	id string
}

// List returns one page of records: those of the selected state, or of
// every state, optionally of one route, that have not expired. Records in
// flight, held and released come from the state indexes (no SCAN), tag by
// tag and within a tag state by state in order of expiry time; completed
// records, which have no index, come after them from a SCAN of the record
// keys (master by master on a Cluster). Every round trip is a pipeline or
// one SCAN page, each with its own OpTimeout deadline. The cursor is
// opaque; following NextCursor until it is "" visits every record that
// exists throughout the walk exactly once, as long as records do not change
// state meanwhile (a record that changes state moves to another index and
// may be seen twice or not at all; SCAN may also return a key twice when
// Redis resizes its table, or the masters change). A page may hold fewer
// than Limit records (even none) while NextCursor is not "", when the
// route filter skipped many records. Errors wrap ErrInvalidArgument for a
// bad State or Cursor.
func (s *Store) List(ctx context.Context, f store.ListFilter) (store.ListPage, error) {
	states := store.IndexStates()[:]
	if f.State != "" {
		st := store.StoredState(f.State)
		if st == "" {
			return store.ListPage{}, fmt.Errorf("%w: state %q is not one of in_flight, completed, outcome_unknown, released",
				store.ErrInvalidArgument, f.State)
		}
		states = []store.State{stateFromStored(st)}
	}
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	limit = min(limit, store.MaxListLimit)
	l := &lister{s: s, route: f.Route}
	for _, st := range states {
		if st == store.StateCompleted {
			l.completed = true
		} else {
			l.states = append(l.states, st)
		}
	}
	scanning := false
	var sp scanPos
	if f.Cursor != "" {
		var err error
		if scanning, sp, err = l.decodeCursor(f.Cursor); err != nil {
			return store.ListPage{}, err
		}
	}
	tctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	now, err := s.client.Time(tctx).Result()
	cancel()
	if err != nil {
		return store.ListPage{}, fmt.Errorf("store: list: %w", err)
	}
	l.now = now.UnixMilli()

	page := store.ListPage{Records: []*store.Record{}}
	scanned := 0
	if !scanning {
		for len(page.Records) < limit && scanned < limit+listMaxScan {
			need := limit - len(page.Records)
			if err := l.fill(ctx, need); err != nil {
				return store.ListPage{}, err
			}
			if len(l.queue) == 0 {
				break
			}
			take := l.queue[:min(need, len(l.queue))]
			ids := make([]string, len(take))
			for i, e := range take {
				ids[i] = e.id
			}
			recs, err := l.read(ctx, ids)
			if err != nil {
				return store.ListPage{}, err
			}
			for i, r := range recs {
				// A record missing (expired, evicted) or in another state
				// than its index says (it changed state since the index was
				// read, or a stale entry) is not listed from this index.
				if r != nil && r.State == l.states[take[i].idx%len(l.states)] && l.wanted(r) {
					page.Records = append(page.Records, r)
				}
			}
			l.queue = l.queue[len(take):]
			scanned += len(take)
		}
		if err := l.fill(ctx, 1); err != nil {
			return store.ListPage{}, err
		}
		if len(l.queue) > 0 {
			page.NextCursor = l.encodeIndexCursor(l.queue[0].listPos)
			return page, nil
		}
		if !l.completed {
			return page, nil
		}
	}
	// The completed records, after the indexes: the rest of the page, and
	// then one more, so that a page only ends the walk when nothing is left.
	recs, next, err := l.scan(ctx, sp, limit-len(page.Records), limit+listMaxScan-scanned)
	if err != nil {
		return store.ListPage{}, err
	}
	page.Records = append(page.Records, recs...)
	if next != nil {
		page.NextCursor = l.encodeScanCursor(*next)
	}
	return page, nil
}

// lister walks the indexes and the completed records of one List call.
type lister struct {
	s         *Store
	states    []store.State // the filter's states that have an index
	completed bool          // whether the filter takes completed records
	route     string
	now       int64 // Redis clock, ms: entries scored at or before it have expired
	queue     []listEntry
	next      listPos // where the next ZRANGEBYSCORE starts (after queue)
}

func (l *lister) wanted(r *store.Record) bool { return l.route == "" || r.Route == l.route }

func (l *lister) total() int { return l.s.indexShards() * len(l.states) }

func (l *lister) indexKey(idx int) string {
	return l.s.IndexKey(tagOf(idx/len(l.states)), l.states[idx%len(l.states)])
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
		cmds := make([]*goredis.ZSliceCmd, 0, end-first)
		pctx, cancel := context.WithTimeout(ctx, l.s.opTimeout)
		pipe := l.s.client.Pipeline()
		for idx := first; idx < end; idx++ {
			start := listPos{idx: idx, score: l.now + 1}
			if idx == l.next.idx && l.next.score >= start.score {
				start = l.next
			}
			starts = append(starts, start)
			cmds = append(cmds, pipe.ZRangeByScoreWithScores(pctx, l.indexKey(idx), &goredis.ZRangeBy{
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

// read fetches the summaries of records (one GETRANGE each, in one
// pipeline, and again, longer, for the few whose summary did not fit);
// nil for a record that no longer exists. Header, body, token and audit
// trail are left out.
func (l *lister) read(ctx context.Context, ids []string) ([]*store.Record, error) {
	recs := make([]*store.Record, len(ids))
	lengths := make([]int, len(ids))
	for i := range lengths {
		lengths[i] = summaryBytes
	}
	for round := 0; round < 3; round++ {
		pctx, cancel := context.WithTimeout(ctx, l.s.opTimeout)
		pipe := l.s.client.Pipeline()
		cmds := make([]*goredis.StringCmd, len(ids))
		for i, id := range ids {
			if lengths[i] > 0 {
				cmds[i] = pipe.GetRange(pctx, l.s.Key(id), 0, int64(lengths[i]-1))
			}
		}
		_, err := pipe.Exec(pctx)
		cancel()
		if err != nil && err != goredis.Nil {
			return nil, fmt.Errorf("store: list: read records: %w", err)
		}
		more := false
		for i, cmd := range cmds {
			if cmd == nil {
				continue
			}
			lengths[i] = 0
			v := cmd.Val()
			if v == "" {
				continue // gone
			}
			r, wanted, err := decodeBlob(ids[i], v, true)
			if err != nil {
				return nil, err
			}
			if wanted > 0 {
				lengths[i], more = wanted, true
				continue
			}
			r.Token, r.Audit, r.Header, r.Body = "", nil, nil, nil
			recs[i] = r
		}
		if !more {
			break
		}
	}
	return recs, nil
}

// scan walks the completed records from pos: it returns up to need of
// them and the position of the next one, nil when there is none. It stops
// early, returning where it got to, after looking at budget keys.
func (l *lister) scan(ctx context.Context, pos scanPos, need, budget int) ([]*store.Record, *scanPos, error) {
	nodes, err := l.s.masters(ctx)
	if err != nil {
		return nil, nil, err
	}
	match := globEscape(l.s.prefix) + "{???}*"
	var out []*store.Record
	for looked := 0; pos.node < len(nodes); {
		if looked >= budget {
			return out, &pos, nil
		}
		pctx, cancel := context.WithTimeout(ctx, l.s.opTimeout)
		keys, next, err := nodes[pos.node].ScanType(pctx, pos.cursor, match, scanCount, "string").Result()
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("store: list: scan: %w", err)
		}
		ids := make([]string, 0, len(keys))
		at := make([]int, 0, len(keys)) // each id's place in the page
		for i, k := range keys[min(pos.skip, len(keys)):] {
			if id, ok := l.s.idFromKey(k); ok {
				ids = append(ids, id)
				at = append(at, pos.skip+i)
			}
		}
		recs, err := l.read(ctx, ids)
		if err != nil {
			return nil, nil, err
		}
		for i, r := range recs {
			if r == nil || r.State != store.StateCompleted || !l.wanted(r) {
				continue
			}
			if len(out) == need {
				return out, &scanPos{node: pos.node, cursor: pos.cursor, skip: at[i]}, nil
			}
			out = append(out, r)
		}
		looked += len(keys)
		if next == 0 {
			pos = scanPos{node: pos.node + 1}
		} else {
			pos = scanPos{node: pos.node, cursor: next}
		}
	}
	return out, nil, nil
}

// masters are the nodes that hold records: the masters of a Cluster in
// order of address, else the one client.
func (s *Store) masters(ctx context.Context) ([]goredis.Cmdable, error) {
	cc, ok := s.client.(*goredis.ClusterClient)
	if !ok {
		return []goredis.Cmdable{s.client}, nil
	}
	var (
		mu    sync.Mutex
		nodes []*goredis.Client
	)
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list: masters: %w", err)
	}
	slices.SortFunc(nodes, func(a, b *goredis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
	out := make([]goredis.Cmdable, len(nodes))
	for i, c := range nodes {
		out[i] = c
	}
	return out, nil
}

// Cursors are base64url of "v2 i <tag> <state> <score> <tie>" in the index
// walk, or "v2 s <master> <scan cursor> <skip>" among completed records:
// positions name the tag and state rather than an index number, so that a
// cursor cannot silently mean another index under another filter.
const cursorVersion = "v2"

func (l *lister) encodeIndexCursor(p listPos) string {
	tag := tagOf(p.idx / len(l.states))
	st := store.StoredState(l.states[p.idx%len(l.states)])
	return encodeCursor(cursorVersion + " i " + tag + " " + st + " " + strconv.FormatInt(p.score, 10) + " " + strconv.FormatInt(p.tie, 10))
}

func (l *lister) encodeScanCursor(p scanPos) string {
	return encodeCursor(cursorVersion + " s " + strconv.Itoa(p.node) + " " + strconv.FormatUint(p.cursor, 10) + " " + strconv.Itoa(p.skip))
}

func encodeCursor(text string) string { return base64.RawURLEncoding.EncodeToString([]byte(text)) }

// decodeCursor reads a cursor: a position in the index walk (set as
// l.next) or, with scanning, one among the completed records.
func (l *lister) decodeCursor(c string) (scanning bool, sp scanPos, err error) {
	bad := func(why string) (bool, scanPos, error) {
		return false, scanPos{}, fmt.Errorf("%w: cursor %q: %s", store.ErrInvalidArgument, c, why)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return bad("not a cursor of this store")
	}
	parts := strings.Split(string(raw), " ")
	if len(parts) < 2 || parts[0] != cursorVersion {
		return bad("not a cursor of this store")
	}
	switch {
	case parts[1] == "s" && len(parts) == 5:
		if !l.completed {
			return bad("made for another state filter")
		}
		node, err1 := strconv.Atoi(parts[2])
		cursor, err2 := strconv.ParseUint(parts[3], 10, 64)
		skip, err3 := strconv.Atoi(parts[4])
		if err1 != nil || err2 != nil || err3 != nil || node < 0 || skip < 0 {
			return bad("bad position")
		}
		return true, scanPos{node: node, cursor: cursor, skip: skip}, nil
	case parts[1] == "i" && len(parts) == 6:
		tag := parts[2]
		if len(tag) != 3 || Shard(tag) != tag || shardOf(tag) >= l.s.indexShards() {
			return bad("bad tag")
		}
		state := slices.IndexFunc(l.states, func(st store.State) bool { return store.StoredState(st) == parts[3] })
		if state < 0 {
			return bad("made for another state filter")
		}
		score, err1 := strconv.ParseInt(parts[4], 10, 64)
		tie, err2 := strconv.ParseInt(parts[5], 10, 64)
		if err1 != nil || err2 != nil || score < 0 || tie < 0 {
			return bad("bad position")
		}
		l.next = listPos{idx: shardOf(tag)*len(l.states) + state, score: score, tie: tie}
		return false, scanPos{}, nil
	}
	return bad("not a cursor of this store")
}
