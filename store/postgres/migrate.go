package postgres

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The schema is made by the numbered migrations in migrations/
// (NNNN_what.sql), each applied once, in order, and recorded in the
// table migrations of the store's schema. Open applies the ones not
// recorded yet in one transaction under a transaction-scoped advisory
// lock, so gateways starting together take turns and no session state
// outlives it; a schema that records a migration this binary does not
// have (a newer gateway's) is refused. Numbers increase but may leave
// gaps (a number kept for a migration made elsewhere): each migration
// is recorded by its own number, so one merged later into the gap is
// still applied, and none may depend on a later-numbered one.

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one numbered migration.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in order of their numbers,
// which are positive and distinct.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("store: postgres: migration %s is not named NNNN_what.sql", base)
		}
		b, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version < 1 || i > 0 && m.version == ms[i-1].version {
			return nil, fmt.Errorf("store: postgres: migration %s: its number is not positive or is taken", m.name)
		}
	}
	return ms, nil
}

// latest is the highest migration number of ms (0: none).
func latest(ms []migration) int {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// lockKey is the advisory lock of schema's migrations.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("idemgate migrations " + schema))
	return int64(h.Sum64())
}

// migrate brings the schema up to this binary's version; it reports the
// version found and the version left.
func (e *Engine) migrate(ctx context.Context) (from, to int, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, 0, err
	}
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(e.schema)); err != nil {
			return err
		}
		schema := pgx.Identifier{e.schema}.Sanitize()
		for _, q := range []string{
			"CREATE SCHEMA IF NOT EXISTS " + schema,
			"CREATE TABLE IF NOT EXISTS " + schema + ".migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
			"SET LOCAL search_path TO " + schema,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, "SELECT version FROM migrations ORDER BY version")
		if err != nil {
			return err
		}
		done, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		if len(done) > 0 {
			from = int(done[len(done)-1])
		}
		known := make(map[int]bool, len(ms))
		for _, m := range ms {
			known[m.version] = true
		}
		for _, v := range done {
			if !known[int(v)] {
				return fmt.Errorf("schema %q is at version %d, newer than this binary's %d: "+
					"a newer gateway migrated it (migration %04d is not in this binary); run that version (or newer) here too",
					e.schema, from, latest(ms), v)
			}
		}
		for _, m := range ms {
			if slices.Contains(done, int32(m.version)) {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
	return from, latest(ms), err
}
