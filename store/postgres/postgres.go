// Package postgres is the record store on PostgreSQL (pgx v5 and its
// pool): the store.Engine contract, proven by the conformance suite
// (store/storetest) like the other engines.
//
// A claim is one statement (INSERT … ON CONFLICT … DO UPDATE …
// RETURNING, see claim.go) decided on the database's clock and fenced by
// the caller's token; each execution also draws a number from the
// sequence fences. A completion (complete.go) and a renewal are one
// fenced statement each. Every other change locks the record's row,
// applies the contract's rule and writes it back in the same
// transaction, fenced by the token it read. The claim commits as the server's
// synchronous_commit says (on by default, and with a synchronous standby
// it waits for it) before anything is forwarded; a completion commits
// with synchronous_commit off: visible at once, durable within the WAL
// writer's delay, and a crash that loses it leaves the claim in flight,
// which becomes outcome unknown, never a second execution.
//
// No session state is used outside migrations (which hold a
// transaction-scoped advisory lock) except the LISTEN of the notices'
// own connection (Options.ListenURL), so the pool may go through
// PgBouncer in transaction mode (with default_query_exec_mode=exec in
// the URL before PgBouncer 1.21, which lacks prepared statements).
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/store"
)

// DefaultSchema keeps the store's tables out of the application's own.
const DefaultSchema = "idemgate"

// DefaultPoolSize is the pool's default size (or the number of CPUs, when
// larger). A claim holds its connection while its commit waits for the
// WAL to reach the disk, so the pool is sized for the claims committing
// at once, not for CPUs: with pgx's default (4 on a small machine),
// executes waited for one another's WAL flushes, one flush per four
// commits, where a larger pool lets one flush serve the commits that
// came meanwhile (group commit).
const DefaultPoolSize = 16

// Options configure an engine.
type Options struct {
	// URL is the connection string (postgres://user:pass@host:5432/db?…,
	// or key=value pairs), parsed by pgx. Its password is never logged.
	URL string
	// ListenURL, when set, is where the notices' connection goes instead
	// of URL: LISTEN needs a session, so behind a pooler in transaction
	// mode it must reach Postgres directly (or a session-mode pool).
	ListenURL string
	// Schema holds the store's tables (default "idemgate"); it is made
	// when missing.
	Schema string
	// PoolSize is the most connections the pool opens (default:
	// DefaultPoolSize, or the URL's pool_max_conns).
	PoolSize int32
	// OpTimeout bounds every store call (default 2s).
	OpTimeout time.Duration
	// SweepEvery is how often expired records are deleted (default 1m).
	SweepEvery time.Duration
	// SweepBatch is how many expired records one DELETE removes (default
	// 1000): batches keep each transaction short.
	SweepBatch int
	// ExecMode, when set, replaces pgx's statement cache (for a pooler
	// that does not support prepared statements:
	// pgx.QueryExecModeExec).
	ExecMode pgx.QueryExecMode
	// ConfigurePool adjusts the parsed pool configuration (TLS, for
	// one) before it connects.
	ConfigurePool func(*pgxpool.Config) error
	// OnError receives the errors of the engine's own goroutines (the
	// sweep, the notices' connection).
	OnError func(error)
}

// Engine is an open Postgres store. It is safe for concurrent use.
type Engine struct {
	pool   *pgxpool.Pool
	opts   Options
	schema string
	sql    queries

	secretMu sync.Mutex
	secret   []byte
	check    store.SecretCheck // the secret's check value, once read (see KeepSecretCheck)

	notices notices
	counts  *counter

	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once
}

var _ store.Engine = (*Engine)(nil)

// Open connects, migrates the schema (see migrate.go) and starts the
// expiry sweep.
func Open(opts Options) (*Engine, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	opts.OpTimeout = cmp.Or(opts.OpTimeout, store.DefaultOpTimeout)
	opts.SweepEvery = cmp.Or(opts.SweepEvery, time.Minute)
	if opts.SweepBatch <= 0 {
		opts.SweepBatch = 1000
	}
	if opts.OnError == nil {
		opts.OnError = func(error) {}
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: %w", err) // pgx redacts the password
	}
	switch {
	case opts.PoolSize > 0:
		cfg.MaxConns = opts.PoolSize
	case !strings.Contains(opts.URL, "pool_max_conns"):
		cfg.MaxConns = max(cfg.MaxConns, DefaultPoolSize)
	}
	if opts.ExecMode != 0 {
		cfg.ConnConfig.DefaultQueryExecMode = opts.ExecMode
	}
	if opts.ConfigurePool != nil {
		if err := opts.ConfigurePool(cfg); err != nil {
			return nil, fmt.Errorf("store: postgres: %w", err)
		}
	}
	markAcquired(cfg)
	listen := cfg.ConnConfig
	if opts.ListenURL != "" {
		lcfg, err := pgxpool.ParseConfig(opts.ListenURL)
		if err != nil {
			return nil, fmt.Errorf("store: postgres: the listen url: %w", err)
		}
		if opts.ConfigurePool != nil {
			if err := opts.ConfigurePool(lcfg); err != nil {
				return nil, fmt.Errorf("store: postgres: %w", err)
			}
		}
		listen = lcfg.ConnConfig
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("store: postgres %s: %w", Redacted(opts.URL), err)
	}
	counts := newCounter()
	e := &Engine{pool: pool, opts: opts, schema: opts.Schema, sql: newQueries(opts.Schema, counts), counts: counts, stop: make(chan struct{})}
	e.notices.init(e, listen)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+opts.OpTimeout)
	defer cancel()
	if _, _, err := e.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: postgres %s: %w", Redacted(opts.URL), err)
	}
	e.done.Add(2)
	go e.sweepLoop()
	go e.countLoop()
	e.report(true)
	return e, nil
}

// Redacted is the connection URL without its password, for messages:
// the one in its user information and libpq's password and sslpassword
// parameters.
func Redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "(a connection string)"
	}
	if q := u.Query(); q.Has("password") || q.Has("sslpassword") {
		for _, k := range []string{"password", "sslpassword"} {
			if q.Has(k) {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// Schema is the schema holding the store's tables.
func (e *Engine) Schema() string { return e.schema }

// Pool is the engine's connection pool.
func (e *Engine) Pool() *pgxpool.Pool { return e.pool }

// Close stops the sweep and the notices and closes the pool.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.report(false)
		close(e.stop)
		e.notices.close()
		e.done.Wait()
		e.pool.Close()
	})
	return nil
}

// nowSQL is the database clock in milliseconds.
const nowSQL = "floor(extract(epoch from clock_timestamp()) * 1000)::bigint"

// Now reads the database clock, the one leases and lifetimes are decided
// by.
func (e *Engine) Now(ctx context.Context) (time.Time, error) {
	var ms int64
	err := e.pool.QueryRow(ctx, "SELECT "+nowSQL).Scan(&ms)
	return time.UnixMilli(ms), err
}

// ExpiresAt is when record id expires (zero when there is none).
func (e *Engine) ExpiresAt(ctx context.Context, id string) (time.Time, error) {
	var ms int64
	err := e.pool.QueryRow(ctx, "SELECT expire_at FROM "+e.sql.records+" WHERE id = $1", id).Scan(&ms)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms), err
}

// call bounds one store call by the op timeout.
// Its wait for a connection of the pool counts (see poolWaitErr).
func (e *Engine) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithValue(ctx, gotConnKey{}, new(atomic.Bool)), e.opts.OpTimeout)
}

// mutation is what a change decided: next is the record to write (nil:
// none), with sync=false it commits with synchronous_commit off, and
// notify wakes the record's waiters.
type mutation struct {
	next   *rec
	async  bool
	notify bool
	// tomb: next leaves a tombstone outliving it by tomb ms; dropTomb:
	// next's tombstone is deleted. Both in the same transaction.
	tomb     int64
	dropTomb bool
}

// maxRetries bounds the rounds of a change whose insert of a missing
// record met a concurrent one.
const maxRetries = 5

// errRetry: the record appeared while a change wrote it anew.
var errRetry = errors.New("retry")

// update runs one change of record id in a transaction: it locks the
// row, reads the clock, calls f with the record (nil when it does not
// exist or has expired) and writes what f returns, fenced by the row
// lock. It returns the record as the call left it.
func (e *Engine) update(ctx context.Context, op, id string, f func(cur *rec, now int64) mutation) (*rec, error) {
	ctx, cancel := e.call(ctx)
	defer cancel()
	for range maxRetries {
		out, err := e.updateOnce(ctx, id, f)
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			return nil, e.opErr(op, id, e.poolWaitErr(ctx, err))
		}
		return out, nil
	}
	return nil, e.opErr(op, id, errors.New("the record kept changing under the call"))
}

func (e *Engine) updateOnce(ctx context.Context, id string, f func(cur *rec, now int64) mutation) (*rec, error) {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var b pgx.Batch
	b.Queue(e.sql.lock, id)
	b.Queue("SELECT " + nowSQL)
	br := tx.SendBatch(ctx, &b)
	cur, err := scanRec(br.QueryRow())
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		_ = br.Close()
		return nil, err
	}
	existed := err == nil
	e.counts.view(cur)
	var now int64
	if err := br.QueryRow().Scan(&now); err != nil {
		_ = br.Close()
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	live := cur
	if existed && cur.ExpireAt <= now {
		live = nil
	}
	m := f(live, now)
	if m.next == nil {
		return live, tx.Commit(ctx)
	}
	var w pgx.Batch
	if m.async {
		w.Queue("SET LOCAL synchronous_commit = off")
	}
	switch {
	case existed && live == nil: // written anew over the expired row
		w.Queue(e.sql.updateAnew, m.next.args()...)
	case existed:
		w.Queue(e.sql.update, m.next.args()...)
	default:
		w.Queue(e.sql.insert, m.next.args()...)
	}
	if m.notify {
		// Only a record a duplicate found in flight has waiters.
		w.Queue(e.sql.notify, e.notices.channel, id)
	}
	switch n := m.next; {
	case m.tomb > 0:
		w.Queue(e.sql.bury, id, ms(n.CompletedAt), n.Status, n.Reason, n.ExpireAt+m.tomb)
	case m.dropTomb:
		w.Queue(e.sql.unbury, id)
	}
	wr := tx.SendBatch(ctx, &w)
	if m.async {
		if _, err := wr.Exec(); err != nil {
			_ = wr.Close()
			return nil, err
		}
	}
	tag, err := wr.Exec()
	if err == nil && tag.RowsAffected() == 0 {
		err = errRetry // inserted meanwhile: decide again on it
	}
	if err != nil {
		_ = wr.Close()
		return nil, err
	}
	if err := wr.Close(); err != nil {
		return nil, err
	}
	return m.next, tx.Commit(ctx)
}

// opErr words a failed call; a database out of disk space is
// store.ErrNoRoom.
func (e *Engine) opErr(op, id string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "53100" || pe.Code == "53200") { // disk_full, out_of_memory
		return fmt.Errorf("store: postgres: %s %s: %w: %w", op, id, store.ErrNoRoom, err)
	}
	return fmt.Errorf("store: postgres: %s %s: %w", op, id, err)
}

// queries are the statements on the tables of one schema.
type queries struct {
	records, secret string
	tombstones      string
	twins           string
	bury, unbury    string // a tombstone written, deleted
	lock            string // the record, locked
	get             string
	insert, update  string
	updateAnew      string // update of an expired row: a new epoch
	notify          string // a notice, when the record has waiters
	// claim and complete, and their forms for routes that keep
	// tombstones or twin entries (claim.go, complete.go).
	claim, complete         string
	claimPast, completePast string
	// fast is the fast form of each claim and completion statement.
	fast                    map[string]string
	list                    string
	counts                  string
	flushCounts, sweepCount string
	listeners               string
	listen                  string // this gateway's row in listeners, renewed
	sweepListeners          string
}

func newQueries(schema string, counts *counter) queries {
	q := queries{
		records: pgx.Identifier{schema, "records"}.Sanitize(),
		secret:  pgx.Identifier{schema, "secret"}.Sanitize(),
		counts:  pgx.Identifier{schema, "counts"}.Sanitize(),
	}
	q.listeners = pgx.Identifier{schema, "listeners"}.Sanitize()
	// waited: somebody may wait for the record whose waiters column is
	// col (notices.go).
	waited := func(col string) string {
		return "(" + col + " OR EXISTS (SELECT 1 FROM " + q.listeners + " WHERE until > " + nowSQL + "))"
	}
	cols := recCols(q.counts)
	q.lock = "SELECT " + cols + " FROM " + q.records + " WHERE id = $1 FOR UPDATE"
	q.get = "SELECT " + cols + ", " + nowSQL + " FROM " + q.records + " WHERE id = $1"
	params := make([]string, len(writeCols))
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	q.insert = "INSERT INTO " + q.records + " (" + joinCols(writeCols) + ", epoch) VALUES (" + joinCols(params) + ", " + nowSQL + ") ON CONFLICT (id) DO NOTHING"
	set := make([]string, 0, len(writeCols)-1)
	for i, c := range writeCols[1:] {
		set = append(set, fmt.Sprintf("%s = $%d", c, i+2))
	}
	q.update = "UPDATE " + q.records + " SET " + joinCols(set) + " WHERE id = $1"
	q.updateAnew = "UPDATE " + q.records + " SET " + joinCols(set) + ", epoch = " + nowSQL + ", waiters = false WHERE id = $1"
	q.notify = "SELECT pg_notify($1, $2) FROM " + q.records + " WHERE id = $2 AND " + waited("waiters")
	q.listen = "INSERT INTO " + q.listeners + " (engine, until) VALUES ($1, " + nowSQL + " + $2) ON CONFLICT (engine) DO UPDATE SET until = excluded.until"
	q.sweepListeners = "DELETE FROM " + q.listeners + " WHERE until <= " + nowSQL
	q.list = "SELECT " + cols + " FROM " + q.records +
		" WHERE state = $1 AND id >= $2 AND expire_at > " + nowSQL + " AND ($3 = '' OR route = $3) ORDER BY id LIMIT $4"
	q.tombstones = pgx.Identifier{schema, "tombstones"}.Sanitize()
	q.twins = pgx.Identifier{schema, "twins"}.Sanitize()
	fences := pgx.Identifier{schema, "fences"}.Sanitize()
	q.claim = counts.withEngine(claimSQL(q.records, fences, q.counts, "", "", false))
	q.claimPast = counts.withEngine(claimSQL(q.records, fences, q.counts, q.tombstones, q.twins, false))
	q.complete = completeSQL(q.records, waited("w.waiters"), "", "", false)
	q.completePast = completeSQL(q.records, waited("w.waiters"), q.tombstones, q.twins, false)
	q.fast = map[string]string{
		q.claim:        counts.withEngine(claimSQL(q.records, fences, q.counts, "", "", true)),
		q.claimPast:    counts.withEngine(claimSQL(q.records, fences, q.counts, q.tombstones, q.twins, true)),
		q.complete:     completeSQL(q.records, waited("w.waiters"), "", "", true),
		q.completePast: completeSQL(q.records, waited("w.waiters"), q.tombstones, q.twins, true),
	}
	q.flushCounts, q.sweepCount = countsSQL(q.records, q.counts, counts.engine)
	q.bury = "INSERT INTO " + q.tombstones + " (id, completed_at, status, reason, expire_at) VALUES ($1, $2, $3, $4, $5)" +
		" ON CONFLICT (id) DO UPDATE SET completed_at = excluded.completed_at, status = excluded.status," +
		" reason = excluded.reason, expire_at = excluded.expire_at"
	q.unbury = "DELETE FROM " + q.tombstones + " WHERE id = $1"
	for _, p := range []*string{&q.lock, &q.get, &q.list} {
		*p = counts.withEngine(*p)
	}
	return q
}

func joinCols(cols []string) string {
	out := ""
	for i, c := range cols {
		if i > 0 {
			out += ", "
		}
		out += c
	}
	return out
}
