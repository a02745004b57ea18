package postgres

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

var schemaSeq atomic.Int64

// openIn opens an engine on url in a new schema of its own, so it starts
// empty; it is closed when the test ends.
func openIn(t testing.TB, url string, o Options) *Engine {
	t.Helper()
	o.URL = url
	if o.Schema == "" {
		o.Schema = fmt.Sprintf("conf%d", schemaSeq.Add(1))
	}
	e, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// harness opens engines on one database, each in a schema of its own.
func harness(url string) storetest.Harness {
	return storetest.Harness{
		Open: func(t testing.TB) store.Engine { return openIn(t, url, Options{PoolSize: 8}) },
		Now: func(t testing.TB, e store.Engine) time.Time {
			now, err := e.(*Engine).Now(context.Background())
			if err != nil {
				t.Fatalf("Now: %v", err)
			}
			return now
		},
		TTL: func(t testing.TB, e store.Engine, id string) time.Duration {
			pe := e.(*Engine)
			exp, err := pe.ExpiresAt(context.Background(), id)
			if err != nil {
				t.Fatalf("ExpiresAt: %v", err)
			}
			if exp.IsZero() {
				return 0
			}
			now, _ := pe.Now(context.Background())
			return exp.Sub(now)
		},
	}
}

// The package's tests share one cluster (pgtest.Shared), each on a
// database of its own; the benchmarks run one with fsync on.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.StopShared()
	os.Exit(code)
}

// TestPostgres runs the engine contract, then the engine's own tests.
func TestPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).CreateDatabase(t)
	t.Run("Conformance", func(t *testing.T) { storetest.Run(t, harness(url)) })
	for name, f := range map[string]func(*testing.T, string){
		"Migrations":            testMigrations,
		"NoticesAcrossGateways": testNoticesAcrossGateways,
		"ExpiryBounded":         testExpiryBounded,
		"PasswordRedacted":      testPasswordRedacted,
		"PoolMetrics":           testPoolMetrics,
		"ReplayReads":           testReplayReads,
		"NoticesForWaiters":     testNoticesForWaiters,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, url)
		})
	}
}

// TestPgBouncer runs the engine contract through PgBouncer in
// transaction mode (each statement or transaction may get another
// server connection), with the statement mode PgBouncer before 1.21
// needs (default_query_exec_mode=exec: no named prepared statements)
// and the notices' LISTEN connection going to Postgres directly.
func TestPgBouncer(t *testing.T) {
	t.Parallel()
	pg := pgtest.Shared(t)
	direct := pg.CreateDatabase(t)
	bouncer := pgtest.StartPgBouncer(t, pg, "transaction")
	db := direct[strings.LastIndex(direct, "/")+1 : strings.Index(direct, "?")]
	url := bouncer.URL(db) + "&default_query_exec_mode=exec"
	h := harness(url)
	h.Open = func(t testing.TB) store.Engine { return openIn(t, url, Options{PoolSize: 8, ListenURL: direct}) }
	storetest.Run(t, h)
}
