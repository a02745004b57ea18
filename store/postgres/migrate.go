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
// table migrations of the store's schema. Open applies the missing
// ones in one transaction under a transaction-scoped advisory lock, so
// gateways starting together take turns and no session state outlives
// it; a schema newer than this binary's migrations is refused.

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one numbered migration.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in order; their numbers
// run 1, 2, … without gaps.
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
		if m.version != i+1 {
			return nil, fmt.Errorf("store: postgres: migration %s out of sequence (want %04d)", m.name, i+1)
		}
	}
	return ms, nil
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
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM migrations").Scan(&from); err != nil {
			return err
		}
		if from > len(ms) {
			return fmt.Errorf("schema %q is at version %d, newer than this binary's %d: "+
				"a newer gateway migrated it; run that version (or newer) here too", e.schema, from, len(ms))
		}
		for _, m := range ms[from:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
	return from, len(ms), err
}
