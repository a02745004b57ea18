package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// The engine's own tests, run by TestPostgres on its cluster.

// testMigrations: gateways starting together on a new schema migrate it
// once (the advisory lock makes them take turns); a schema newer than
// the binary is refused with a message that says so.
func testMigrations(t *testing.T, url string) {
	const schema = "migrations_race"
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			e, err := Open(Options{URL: url, Schema: schema})
			if err == nil {
				_ = e.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("four gateways opening a new schema at once: %v", err)
	}
	e := openIn(t, url, Options{Schema: schema})
	ctx := context.Background()
	var n, version int
	if err := e.pool.QueryRow(ctx, "SELECT count(*), max(version) FROM "+schema+".migrations").Scan(&n, &version); err != nil {
		t.Fatal(err)
	}
	ms, _ := migrations()
	if n != len(ms) || version != latest(ms) {
		t.Fatalf("migrations table: %d rows up to version %d; want %d up to %d", n, version, len(ms), latest(ms))
	}
	// A schema an earlier binary left without the latest migrations is
	// brought up to date by the next Open.
	if _, err := e.pool.Exec(ctx, "DROP TABLE "+schema+".secret_check; ALTER TABLE "+schema+".records DROP COLUMN tool_call; "+
		"DELETE FROM "+schema+".migrations WHERE name IN ('0004_secret_check.sql', '0005_tool_call.sql')"); err != nil {
		t.Fatal(err)
	}
	if up, err := Open(Options{URL: url, Schema: schema}); err != nil {
		t.Fatalf("Open on a schema two migrations behind: %v", err)
	} else {
		_ = up.Close()
	}
	if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".migrations").Scan(&n); err != nil || n != len(ms) {
		t.Fatalf("after the upgrade: %d migrations recorded, %v; want %d", n, err, len(ms))
	}
	if _, err := e.pool.Exec(ctx, "SELECT 1 FROM "+schema+".secret_check; SELECT tool_call FROM "+schema+".records LIMIT 0"); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	if _, err := e.pool.Exec(ctx, "INSERT INTO "+schema+".migrations (version, name) VALUES ($1, 'from_the_future.sql')", latest(ms)+1); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Options{URL: url, Schema: schema})
	want := fmt.Sprintf("schema %q is at version %d, newer than this binary's %d", schema, latest(ms)+1, latest(ms))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open on a newer schema: %v; want an error saying %q", err, want)
	}
	t.Logf("newer schema refused: %v", err)
}

// testNoticesAcrossGateways: a waiter on one gateway is woken by NOTIFY
// when another gateway completes the record.
func testNoticesAcrossGateways(t *testing.T, url string) {
	a := openIn(t, url, Options{})
	b := openIn(t, url, Options{Schema: a.Schema()})
	n := b.Notices()
	t.Cleanup(n.Need())
	for i := 0; i < 500 && !n.Live(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !n.Live() {
		t.Fatal("notices not live within 5s")
	}
	id := storetest.NewID(t)
	w := n.Watch(id)
	defer w.Stop()
	res := storetest.MustClaim(t, a, storetest.ClaimReq(id, "tok-a"))
	if !res.Claimed {
		t.Fatal("not claimed")
	}
	ok, err := res.Claim.Complete(context.Background(), storetest.SampleResult())
	storetest.MustOK(t, "Complete on gateway a", ok, err)
	select {
	case <-w.C:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter on gateway b was not woken within 5s of the completion on gateway a")
	}
}

// testExpiryBounded: expired records are deleted in batches, and the
// space they took is reused: after the first waves (a deleted index page
// is recycled by the vacuum after the one that deleted it, so the size
// settles by the third wave), another wave
// of as many records, expired, swept and vacuumed like them, leaves the
// table and its indexes no larger than the wave before.
func testExpiryBounded(t *testing.T, url string) {
	const n, waves = 100_000, 4
	e := openIn(t, url, Options{SweepBatch: 5000})
	ctx := context.Background()
	live := storetest.NewID(t)
	storetest.MustClaim(t, e, storetest.ClaimReq(live, "tok"))
	size := func() int64 {
		var s int64
		if err := e.pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", e.sql.records).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// vacuum vacuums the table until no dead row is left in it, as
	// autovacuum would in time: while a transaction of another test on
	// the cluster (the other cases run beside this one) is older than the
	// sweep, VACUUM may not remove the rows it deleted yet. It returns
	// how many VACUUMs that took (at most 50, 100 ms apart).
	vacuum := func() int {
		for try := 1; ; try++ {
			if _, err := e.pool.Exec(ctx, "VACUUM "+e.sql.records); err != nil {
				t.Fatal(err)
			}
			var dead int64
			if err := e.pool.QueryRow(ctx, "SELECT coalesce(n_dead_tup, 0) FROM pg_stat_all_tables WHERE relid = $1::regclass", e.sql.records).Scan(&dead); err != nil {
				t.Fatal(err)
			}
			if dead == 0 || try == 50 {
				return try
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var sizes []int64
	for wave := range waves {
		if _, err := e.pool.Exec(ctx, "INSERT INTO "+e.sql.records+" (id, state, token, fence, started_at, expire_at, body) "+
			"SELECT 'w' || $2::int || '-' || i, 'completed', 't', i, 1, 1, convert_to(repeat('x', 200), 'UTF8') FROM generate_series(1, $1) i", n, wave); err != nil {
			t.Fatal(err)
		}
		full := size()
		deleted, err := e.Sweep(ctx)
		if err != nil || deleted != n {
			t.Fatalf("Sweep: %d deleted, %v; want %d", deleted, err, n)
		}
		tries := vacuum()
		sizes = append(sizes, size())
		t.Logf("wave %d: %d expired records: %d bytes; swept and vacuumed (%d VACUUMs): %d bytes", wave+1, n, full, tries, sizes[wave])
	}
	if last, before := sizes[waves-1], sizes[waves-2]; last > before+before/10 {
		t.Fatalf("the table grew from %d to %d bytes with wave %d of expired records", before, last, waves)
	}
	if storetest.MustGet(t, e, live).State != store.StateInFlight {
		t.Fatal("the live record was swept")
	}
}

// testPasswordRedacted: a connection that fails does not show the
// password.
func testPasswordRedacted(t *testing.T, _ string) {
	_, err := Open(Options{URL: "postgres://gw:s3cr3t-pw@127.0.0.1:1/db?sslmode=disable&connect_timeout=1", OpTimeout: time.Second})
	if err == nil {
		t.Fatal("Open on a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("the error shows the password: %v", err)
	}
	t.Logf("error: %v", err)
}

// testPoolMetrics: the pool of an open engine is reported by schema,
// and no more once it is closed.
func testPoolMetrics(t *testing.T, url string) {
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	e, err := Open(Options{URL: url, Schema: "metrics", PoolSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	storetest.MustClaim(t, e, storetest.ClaimReq(storetest.NewID(t), "tok"))
	gauge := func(name, state string) (float64, bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["schema"] == "metrics" && (state == "" || labels["state"] == state) {
					return m.GetGauge().GetValue(), true
				}
			}
		}
		return 0, false
	}
	if v, ok := gauge("idemgate_postgres_pool_max_connections", ""); !ok || v != 3 {
		t.Fatalf("idemgate_postgres_pool_max_connections = %v (%v), want 3", v, ok)
	}
	if v, ok := gauge("idemgate_postgres_pool_connections", "idle"); !ok || v < 1 {
		t.Fatalf("idle connections = %v (%v), want at least the claim's", v, ok)
	}
	// A second engine on the same schema (another config with other
	// store options): one series, the pools summed.
	e2, err := Open(Options{URL: url, Schema: "metrics", PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := gauge("idemgate_postgres_pool_max_connections", ""); !ok || v != 5 {
		t.Fatalf("two engines on one schema: idemgate_postgres_pool_max_connections = %v (%v), want 5", v, ok)
	}
	_ = e2.Close()
	_ = e.Close()
	if _, ok := gauge("idemgate_postgres_pool_max_connections", ""); ok {
		t.Fatal("a closed engine's pool is still reported")
	}
}
