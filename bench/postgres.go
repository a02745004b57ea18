package main

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// pgWork is what the cluster did during one run of a Postgres variant.
type pgWork struct {
	statements int64         // -1: not counted
	cpu        time.Duration // -1: not measured
}

// work reads the counters measure compares before and after a run.
func (s *pgServer) work() pgWork {
	w := pgWork{statements: -1, cpu: -1}
	if s.counting {
		if n, err := s.statements(); err == nil {
			w.statements = n
		}
	}
	if d, err := s.cpu(); err == nil {
		w.cpu = d
	}
	return w
}

// applyPostgres puts what the cluster did between before and after into
// st, a Postgres variant's round of requests: statements per request in
// the commands column (the statements are its round trips, as scripts are
// Redis's), the cluster's CPU per request in the store's.
func applyPostgres(st *roundStats, before, after pgWork, requests int) {
	st.cmdsPR, st.scriptPR, st.cpu[procRedis] = -1, -1, -1
	if requests == 0 {
		return
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
