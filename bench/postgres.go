package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/pgtest"
)

// pgDatabase is the database the gateway's Postgres site keeps its
// records in.
const pgDatabase = "idemgate_bench"

// pgSettings are the throw-away cluster's settings beyond pgtest's: the
// durability of a production server (pgtest turns fsync off for tests;
// the claim's synchronous commit is part of what an execute costs), and
// pg_stat_statements, which counts the statements the gateway sends.
var pgSettings = []string{
	"fsync=on", "full_page_writes=on", "synchronous_commit=on",
	"shared_preload_libraries=pg_stat_statements",
	"pg_stat_statements.track_planning=on",
}

// pgServer is a throw-away PostgreSQL cluster on loopback (started like
// the tests' clusters, by internal/pgtest), with a connection to its
// "postgres" database for the statement counts.
type pgServer struct {
	*pgtest.Cluster
	conn *pgx.Conn
	// counting: pg_stat_statements is loaded, so statements() works.
	counting bool
	version  string
}

// startPostgres starts the cluster and makes the gateway's database. It
// fails when the Postgres binaries are not installed (pgtest.BinDir).
func startPostgres() (*pgServer, error) {
	bin, err := pgtest.BinDir()
	if err != nil {
		return nil, err
	}
	c, err := pgtest.Launch(bin, pgSettings...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &pgServer{Cluster: c}
	if s.conn, err = pgx.Connect(ctx, c.URL("postgres")); err != nil {
		c.Remove()
		return nil, err
	}
	if _, err := s.conn.Exec(ctx, "CREATE DATABASE "+pgDatabase); err != nil {
		s.stop()
		return nil, err
	}
	_ = s.conn.QueryRow(ctx, "SHOW server_version").Scan(&s.version)
	if _, err := s.conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err == nil {
		_, err := s.statements()
		s.counting = err == nil
	}
	return s, nil
}

func (s *pgServer) stop() {
	_ = s.conn.Close(context.Background())
	s.Remove()
}

// store is the gateway site's store argument.
func (s *pgServer) store() string { return s.URL(pgDatabase) }

// statements returns how many statements the gateway's database has run
// so far (pg_stat_statements, BEGIN and COMMIT included; the counts of
// this connection's own queries are in the database "postgres" and left
// out).
func (s *pgServer) statements() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	err := s.conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`, pgDatabase).Scan(&n)
	return n, err
}

// cpu returns the CPU time the cluster has used so far: the postmaster's
// own and that of the children it has reaped (utime, stime, cutime and
// cstime), and that of its live children (the backends, the WAL writer,
// …). A child that exits between two readings leaves its CPU time
// uncounted up to when the postmaster reaps it; the pool's backends live
// as long as the gateway does.
func (s *pgServer) cpu() (time.Duration, error) {
	pid := s.Pid()
	if pid == 0 {
		return 0, errors.New("postgres does not run")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	total, err := parseStatReaped(string(b))
	if err != nil {
		return 0, err
	}
	for _, kid := range s.Children() {
		if d, err := cpuTime(kid); err == nil {
			total += d
		}
	}
	return total, nil
}

// parseStatReaped reads utime, stime, cutime and cstime (fields 14 to
// 17) of /proc/PID/stat: a process's CPU time and that of the children it
// has waited for.
func parseStatReaped(stat string) (time.Duration, error) {
	return statTicks(stat, 14, 17)
}

// walPosition is how many bytes of WAL the cluster has written so far
// (pg_current_wal_lsn).
func (s *pgServer) walPosition() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	err := s.conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").Scan(&n)
	return n, err
}

// stmtStat is what pg_stat_statements counted for one statement of the
// gateway's database.
type stmtStat struct {
	query      string
	calls      int64
	exec, plan float64 // ms, in total
	wal        int64   // bytes, in total
}

// statementStats reads pg_stat_statements for the gateway's database, by
// queryid.
func (s *pgServer) statementStats() (map[int64]stmtStat, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := s.conn.Query(ctx, `SELECT queryid, left(regexp_replace(query, '\s+', ' ', 'g'), 72), calls,
		total_exec_time, total_plan_time, wal_bytes::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`, pgDatabase)
	if err != nil {
		return nil, err
	}
	out := map[int64]stmtStat{}
	for rows.Next() {
		var id int64
		var st stmtStat
		if err := rows.Scan(&id, &st.query, &st.calls, &st.exec, &st.plan, &st.wal); err != nil {
			rows.Close()
			return nil, err
		}
		out[id] = st
	}
	return out, rows.Err()
}

// pgWork is what the cluster did during one run of a Postgres variant.
type pgWork struct {
	statements int64         // -1: not counted
	cpu        time.Duration // -1: not measured
	wal        int64         // WAL position in bytes (-1: not read)
	stmts      map[int64]stmtStat
}

// work reads the counters measure compares before and after a run.
func (s *pgServer) work() pgWork {
	w := pgWork{statements: -1, cpu: -1, wal: -1}
	if s.counting {
		if n, err := s.statements(); err == nil {
			w.statements = n
		}
		if m, err := s.statementStats(); err == nil {
			w.stmts = m
		}
	}
	if d, err := s.cpu(); err == nil {
		w.cpu = d
	}
	if n, err := s.walPosition(); err == nil {
		w.wal = n
	}
	return w
}

// stmtDelta is what each statement did between before and after (those
// that ran), added to into.
func stmtDelta(into map[int64]stmtStat, before, after pgWork) {
	for id, a := range after.stmts {
		b := before.stmts[id]
		if a.calls <= b.calls {
			continue
		}
		d := into[id]
		d.query = a.query
		d.calls += a.calls - b.calls
		d.exec += a.exec - b.exec
		d.plan += a.plan - b.plan
		d.wal += a.wal - b.wal
		into[id] = d
	}
}

// applyPostgres puts what the cluster did between before and after into
// st, a Postgres variant's round of requests: statements per request in
// the commands column (the statements are its round trips, as scripts are
// Redis's), the cluster's CPU per request in the store's.
func applyPostgres(st *roundStats, before, after pgWork, requests int) {
	st.cmdsPR, st.scriptPR, st.cpu[procRedis], st.walPR = -1, -1, -1, -1
	if requests == 0 {
		return
	}
	if before.wal >= 0 && after.wal >= 0 {
		st.walPR = float64(after.wal-before.wal) / float64(requests)
	}
	if before.statements >= 0 && after.statements >= 0 {
		st.cmdsPR = float64(after.statements-before.statements) / float64(requests)
	}
	if before.cpu >= 0 && after.cpu >= 0 {
		st.cpu[procRedis] = (after.cpu - before.cpu) / time.Duration(requests)
	}
}

// postgresSiteTemplate is the gateway's Postgres site, added to
// caddyfileTemplate when the cluster runs: port, store, upstream.
const postgresSiteTemplate = `
:%d {
	idempotency {
		rules routes.yaml
		store %s
	}
	reverse_proxy %s {
		transport http {
			keepalive_idle_conns_per_host 1024
		}
	}
}
`

// pgStatements is what one Postgres variant's statements did over its
// measured rounds.
type pgStatements struct {
	requests int
	byID     map[int64]stmtStat
}

// text lists the statements that ran at least once per 100 requests,
// the costliest first: calls per request, mean execution and planning
// time, WAL bytes per call.
func (p *pgStatements) text(variant string) string {
	if p == nil || p.requests == 0 || len(p.byID) == 0 {
		return ""
	}
	list := make([]stmtStat, 0, len(p.byID))
	for _, st := range p.byID {
		if st.calls*100 >= int64(p.requests) {
			list = append(list, st)
		}
	}
	slices.SortFunc(list, func(a, b stmtStat) int { return cmp.Compare(b.exec+b.plan, a.exec+a.plan) })
	var b strings.Builder
	fmt.Fprintf(&b, "pg_stat_statements, %s (%d requests): calls/req, mean exec ms, mean plan ms, WAL B/call, statement\n", variant, p.requests)
	for _, st := range list {
		c := float64(st.calls)
		fmt.Fprintf(&b, "  %5.2f %7.3f %7.3f %7.0f  %s\n", c/float64(p.requests), st.exec/c, st.plan/c, float64(st.wal)/c, st.query)
	}
	return b.String()
}
