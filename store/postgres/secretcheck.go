package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
)

// KeepSecretCheck keeps check in the table secret_check when it holds
// none yet (the first gateway's insert wins) and returns the one kept.
// The first answer is kept for the life of the engine.
func (e *Engine) KeepSecretCheck(ctx context.Context, check []byte) (store.SecretCheck, error) {
	e.secretMu.Lock()
	defer e.secretMu.Unlock()
	if e.check.Value != nil {
		return store.SecretCheck{Value: slices.Clone(e.check.Value), MadeAt: e.check.MadeAt}, nil
	}
	table := pgx.Identifier{e.schema, "secret_check"}.Sanitize()
	ctx, cancel := e.call(ctx)
	defer cancel()
	var (
		c   store.SecretCheck
		err error
	)
	// A gateway whose insert waited for another's sees neither its own
	// row nor the other's in that statement's snapshot: the second try
	// reads it.
	for range 2 {
		err = e.pool.QueryRow(ctx, "WITH ins AS (INSERT INTO "+table+" (value) VALUES ($1) ON CONFLICT (one) DO NOTHING RETURNING value, made_at) "+
			"SELECT value, made_at FROM ins UNION ALL SELECT value, made_at FROM "+table+" LIMIT 1", check).Scan(&c.Value, &c.MadeAt)
		if !isNoRows(err) {
			break
		}
	}
	if err != nil {
		return store.SecretCheck{}, fmt.Errorf("store: postgres: keep the secret's check value: %w", err)
	}
	e.check = c
	return store.SecretCheck{Value: slices.Clone(c.Value), MadeAt: c.MadeAt}, nil
}

// Where names the store in messages: its URL (password redacted) and
// schema.
func (e *Engine) Where() string {
	return fmt.Sprintf("Postgres %s schema %q", Redacted(e.opts.URL), e.schema)
}
