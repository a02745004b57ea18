package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/pgtest"
)

func TestParseStatReaped(t *testing.T) {
	// utime 250, stime 75, cutime 40, cstime 10 ticks.
	stat := "4242 (postgres) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 40 10 20 0 12 0 100 0 0"
	got, err := parseStatReaped(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3750 * time.Millisecond; got != want {
		t.Errorf("parseStatReaped = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 x 15"} {
		if _, err := parseStatReaped(bad); err == nil {
			t.Errorf("parseStatReaped(%q) = nil error", bad)
		}
	}
}

func TestApplyPostgres(t *testing.T) {
	tests := []struct {
		name           string
		before, after  pgWork
		requests       int
		cmds, storeCPU float64 // cmds per request; µs per request (-1: none)
	}{
		{"counted", pgWork{statements: 100, cpu: time.Second}, pgWork{statements: 900, cpu: 3 * time.Second}, 200, 4, 10000},
		{"no pg_stat_statements", pgWork{statements: -1, cpu: time.Second}, pgWork{statements: -1, cpu: 2 * time.Second}, 1000, -1, 1000},
		{"no CPU", pgWork{statements: 0, cpu: -1}, pgWork{statements: 30, cpu: -1}, 10, 3, -1},
		{"no requests", pgWork{statements: 0, cpu: 0}, pgWork{statements: 5, cpu: time.Second}, 0, -1, -1},
	}
	for _, tt := range tests {
		st := roundStats{cmdsPR: 7, scriptPR: 2}
		st.cpu[procRedis] = 99 * time.Microsecond
		applyPostgres(&st, tt.before, tt.after, tt.requests)
		cpu := -1.0
		if st.cpu[procRedis] >= 0 {
			cpu = float64(st.cpu[procRedis]) / float64(time.Microsecond)
		}
		// Redis's figures never stay in a Postgres variant's row.
		if st.cmdsPR != tt.cmds || st.scriptPR != -1 || cpu != tt.storeCPU {
			t.Errorf("%s: cmds %v, scripts %v, store µs %v; want %v, -1, %v", tt.name, st.cmdsPR, st.scriptPR, cpu, tt.cmds, tt.storeCPU)
		}
	}
}

// TestPostgresTargets: the Postgres variants' targets and side-by-side
// lines, from summaries.
func TestPostgresTargets(t *testing.T) {
	cpu := func(gw float64) [numProcs]float64 { return [numProcs]float64{gw, 40, 0, 0} }
	r := &report{o: options{conns: 64, conns2: 2}, e: &env{}, sum: map[string]variantSummary{
		"plain":          {rps: 10000, p50: 6, p99: 12, cpu: cpu(100)},
		"static":         {rps: 20000, p50: 3, p99: 6, cpu: cpu(50)},
		"execute":        {rps: 7000, p50: 9, p99: 20, cpu: cpu(200)},
		"replay":         {rps: 12000, p50: 5, p99: 10, cpu: cpu(120)},
		"pg-execute":     {rps: 5000, p50: 12, p99: 30, cpu: cpu(250)},
		"pg-replay":      {rps: 8000, p50: 7, p99: 15, cpu: cpu(150)},
		"two-plain":      {rps: 3000, p50: 0.5, p99: 1, cpu: cpu(100)},
		"two-execute":    {rps: 2000, p50: 0.8, p99: 2, cpu: cpu(200)},
		"two-pg-execute": {rps: 900, p50: 1.75, p99: 4, cpu: cpu(260)},
	}}
	for _, name := range []string{"plain", "static", "execute", "replay", "pg-execute", "pg-replay", "two-plain", "two-execute", "two-pg-execute"} {
		v, ok := findVariant(name)
		if !ok {
			t.Fatalf("no variant %s", name)
		}
		r.vs = append(r.vs, v)
	}
	goals := r.goals()
	for _, want := range []string{
		"- pg-execute/plain: 0.50 (rounds 0.00–0.00), target ≥ 0.45: met\n",
		"- pg-replay/static: 0.40 (rounds 0.00–0.00), target ≥ 0.35: met\n",
		"- added p50 per execute on Postgres (2 connections): +1.250 ms, target ≤ 1.00 ms: NOT met\n",
	} {
		if !strings.Contains(goals, want) {
			t.Errorf("goals lack %q:\n%s", want, goals)
		}
	}
	if strings.Contains(goals, "pg-execute/execute") {
		t.Errorf("a ratio without a target is in the goals:\n%s", goals)
	}
	ratios := r.ratios()
	for _, want := range []string{"ratio pg-execute/plain 0.50\n", "ratio pg-replay/static 0.40\n", "ratio pg-execute/execute 0.71\n", "ratio pg-replay/replay 0.67\n"} {
		if !strings.Contains(ratios, want) {
			t.Errorf("ratios lack %q:\n%s", want, ratios)
		}
	}
	want := "pg-execute vs execute (64 connections): req/s 5000 vs 7000 (0.71x), p50 12.000 vs 9.000 ms (+3.000), p99 30.000 vs 20.000 ms, gateway µs/req 250 vs 200\n" +
		"pg-replay vs replay (64 connections): req/s 8000 vs 12000 (0.67x), p50 7.000 vs 5.000 ms (+2.000), p99 15.000 vs 10.000 ms, gateway µs/req 150 vs 120\n" +
		"pg-execute vs execute (2 connections): req/s 900 vs 2000 (0.45x), p50 1.750 vs 0.800 ms (+0.950), p99 4.000 vs 2.000 ms, gateway µs/req 260 vs 200\n"
	if got := r.sideBySide(); got != want {
		t.Errorf("sideBySide =\n%s\nwant\n%s", got, want)
	}
	// The store's CPU (Postgres's here) counts in what a variant adds.
	if c, ok := r.addedCPU("two-pg-execute"); !ok || c != 160 {
		t.Errorf("addedCPU(two-pg-execute) = %v, %v; want 160 (gateway and store)", c, ok)
	}
}

func TestWithoutStore(t *testing.T) {
	vs := withoutStore(allVariants, "postgres")
	if len(vs) != len(allVariants)-4 {
		t.Errorf("%d variants left of %d, want 4 fewer", len(vs), len(allVariants))
	}
	for _, v := range vs {
		if v.store == "postgres" || strings.Contains(v.name, "pg-") {
			t.Errorf("%s left", v.name)
		}
	}
}

// TestStartPostgres starts the benchmark's cluster and reads what it
// measures: the statements the gateway's database runs and the
// cluster's CPU time.
func TestStartPostgres(t *testing.T) {
	if !pgtest.Available() {
		if pgtest.Required() {
			t.Fatalf("postgres not available; %s=1 requires it", pgtest.RequireEnv)
		}
		t.Skipf("postgres not available: install Debian's postgresql package; set %s=1 to make this a failure", pgtest.RequireEnv)
	}
	s, err := startPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	if !s.counting {
		t.Fatal("pg_stat_statements is not counting")
	}
	before := s.work()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.store())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const n = 50
	for range n {
		if _, err := conn.Exec(ctx, "SELECT count(*) FROM generate_series(1, 20000)"); err != nil {
			t.Fatal(err)
		}
	}
	after := s.work()
	// This connection's statements; the counter's own queries are in
	// another database and left out.
	if got := after.statements - before.statements; got != n {
		t.Errorf("statements: %d, want %d", got, n)
	}
	if before.cpu < 0 || after.cpu < before.cpu {
		t.Errorf("cluster CPU: %v before, %v after", before.cpu, after.cpu)
	}
	if !strings.HasPrefix(s.store(), "postgres://") || !strings.Contains(s.store(), "/"+pgDatabase+"?") {
		t.Errorf("store URL %q", s.store())
	}
}

// TestPostgresWAL: the WAL per request and the statements' deltas of a
// round.
func TestPostgresWAL(t *testing.T) {
	before := pgWork{statements: 0, cpu: 0, wal: 1000, stmts: map[int64]stmtStat{
		1: {query: "claim", calls: 10, exec: 1, wal: 500},
		2: {query: "idle", calls: 3},
	}}
	after := pgWork{statements: 10, cpu: time.Second, wal: 5000, stmts: map[int64]stmtStat{
		1: {query: "claim", calls: 110, exec: 11, plan: 2, wal: 40500},
		2: {query: "idle", calls: 3},
		3: {query: "new", calls: 5, exec: 1},
	}}
	var st roundStats
	applyPostgres(&st, before, after, 100)
	if st.walPR != 40 {
		t.Errorf("walPR %v, want 40", st.walPR)
	}
	d := map[int64]stmtStat{}
	stmtDelta(d, before, after)
	if len(d) != 2 || d[1] != (stmtStat{query: "claim", calls: 100, exec: 10, plan: 2, wal: 40000}) || d[3].calls != 5 {
		t.Errorf("stmtDelta = %+v", d)
	}
	text := (&pgStatements{requests: 100, byID: d}).text("pg-execute")
	if !strings.Contains(text, "   1.00   0.100   0.020     400  claim\n") || !strings.Contains(text, "new") {
		t.Errorf("text =\n%s", text)
	}
}
