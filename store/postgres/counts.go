package postgres

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Counts: a claim that changes nothing but a record's attempt count (a
// replay, a conflict with a request in flight, the 409 of a record held
// as outcome unknown) only reads, so that it writes no row version and no
// WAL. The engine counts such attempts in memory, by record id and epoch
// (the epoch tells a record from an earlier one of the same id), and
// flushes them every countEvery into the unlogged table counts, one row
// per record and engine, holding the engine's running total; a record's
// attempts are its attempts column (every claim that wrote counts there)
// plus its counts.
//
// How exact: the engine that counted sees its own count at once (its
// running total in memory, until the table holds it), other engines'
// within countEvery. A gateway that stops uncleanly loses its last
// countEvery of counts; a crash of Postgres (or a failover) loses every
// flushed count, since crash recovery empties unlogged tables and
// standbys do not have them. Only the attempts shown (console, admin
// API, logs) depend on them; nothing the rules decide does.

// countEvery is how often the counts are flushed.
const countEvery = time.Second

// countKey is one record incarnation.
type countKey struct {
	id    string
	epoch int64
}

// countEntry is the running total of one record's counted attempts in
// this engine.
type countEntry struct {
	n, flushed int64 // counted in all, and what the table holds
	expireAt   int64 // the record's expiry when last counted
	flushedAt  time.Time
}

// counter is the engine's counted attempts.
type counter struct {
	engine int64 // this engine's rows in counts

	mu sync.Mutex
	m  map[countKey]*countEntry
}

func newCounter() *counter {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &counter{engine: int64(binary.BigEndian.Uint64(b[:]) >> 1), m: map[countKey]*countEntry{}}
}

// countsCol is the expression of the counts of the record whose id and
// epoch are idCol and epochCol: an array of two, other engines' and this
// engine's (engine is spliced in: the statements are the engine's own).
func countsCol(counts, idCol, epochCol string) string {
	return "(SELECT ARRAY[coalesce(sum(n) FILTER (WHERE engine <> {engine}), 0), coalesce(sum(n) FILTER (WHERE engine = {engine}), 0)]::bigint[] FROM " +
		counts + " WHERE rid = " + idCol + " AND repoch = " + epochCol + ")"
}

// withEngine puts the engine's number into a statement made with
// countsCol.
func (c *counter) withEngine(q string) string {
	return strings.ReplaceAll(q, "{engine}", strconv.FormatInt(c.engine, 10))
}

// view makes r's Attempts include its counts: other engines' from the
// table, this engine's from memory while it counts them there.
func (c *counter) view(r *rec) {
	if r == nil {
		return
	}
	own := r.counted[1]
	c.mu.Lock()
	if e := c.m[countKey{r.ID, r.epoch}]; e != nil {
		own = e.n
	}
	c.mu.Unlock()
	r.extra = r.counted[0] + own
	r.Attempts += r.extra
}

// count counts one attempt of r, which has been read (view not yet
// applied), and applies view.
func (c *counter) count(r *rec) {
	k := countKey{r.ID, r.epoch}
	c.mu.Lock()
	e := c.m[k]
	if e == nil {
		e = &countEntry{n: r.counted[1], flushed: r.counted[1]}
		c.m[k] = e
	}
	e.n++
	e.expireAt = max(e.expireAt, r.ExpireAt)
	own := e.n
	c.mu.Unlock()
	r.extra = r.counted[0] + own
	r.Attempts += r.extra
}

// pending returns the totals the table lacks, and forgets the entries
// the table has held for longer than keep (no read still in progress
// can have missed them).
func (c *counter) pending(now time.Time, keep time.Duration) (ids []string, epochs, ns, expires []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if e.n == e.flushed {
			if now.Sub(e.flushedAt) > keep {
				delete(c.m, k)
			}
			continue
		}
		ids, epochs, ns, expires = append(ids, k.id), append(epochs, k.epoch), append(ns, e.n), append(expires, e.expireAt)
	}
	return ids, epochs, ns, expires
}

// flushed notes that the table holds these totals.
func (c *counter) flushed(ids []string, epochs, ns []int64, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, id := range ids {
		if e := c.m[countKey{id, epochs[i]}]; e != nil && ns[i] > e.flushed {
			e.flushed, e.flushedAt = ns[i], at
		}
	}
}

// flushCounts writes the totals the table lacks: one statement, committed
// asynchronously (the table is unlogged).
func (e *Engine) flushCounts(ctx context.Context) error {
	ids, epochs, ns, expires := e.counts.pending(time.Now(), e.opts.OpTimeout+2*countEvery)
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	if _, err := e.pool.Exec(ctx, e.sql.flushCounts, ids, epochs, ns, expires); err != nil {
		return fmt.Errorf("store: postgres: counting attempts: %w", err)
	}
	e.counts.flushed(ids, epochs, ns, time.Now())
	return nil
}

func (e *Engine) countLoop() {
	defer e.done.Done()
	t := time.NewTicker(countEvery)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			if err := e.flushCounts(context.Background()); err != nil {
				e.opts.OnError(err)
			}
			return
		case <-t.C:
			if err := e.flushCounts(context.Background()); err != nil {
				e.opts.OnError(err)
			}
		}
	}
}

// countsSQL are the statements on the table counts: the flush of this
// engine's totals, and the sweep of the rows whose record is gone.
func countsSQL(records, counts string, engine int64) (flush, sweep string) {
	flush = "INSERT INTO " + counts + " (rid, repoch, engine, n, expire_at)" +
		" SELECT u.rid, u.repoch, " + strconv.FormatInt(engine, 10) + ", u.n, u.expire_at" +
		" FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(rid, repoch, n, expire_at)" +
		" ON CONFLICT (rid, repoch, engine) DO UPDATE SET n = greatest(" + counts + ".n, excluded.n)," +
		" expire_at = greatest(" + counts + ".expire_at, excluded.expire_at)"
	sweep = "DELETE FROM " + counts + " WHERE (rid, repoch, engine) IN (SELECT k.rid, k.repoch, k.engine FROM " + counts + " k" +
		" WHERE k.expire_at <= " + nowSQL + " AND NOT EXISTS (SELECT 1 FROM " + records + " r WHERE r.id = k.rid AND r.epoch = k.repoch" +
		" AND r.expire_at > " + nowSQL + ") ORDER BY k.expire_at LIMIT $1 FOR UPDATE SKIP LOCKED)"
	return flush, sweep
}
