package postgres

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
)

// secretSize is the deployment secret's length in bytes.
const secretSize = 32

// Secret returns the deployment secret kept in the table secret, creating
// a random one the first time: the first gateway's insert wins, every
// other reads it.
func (e *Engine) Secret(ctx context.Context) ([]byte, error) {
	b := make([]byte, secretSize)
	_, _ = rand.Read(b)
	return e.readSecret(ctx, "create", "WITH ins AS (INSERT INTO "+e.sql.secret+" (value) VALUES ($1) ON CONFLICT (one) DO NOTHING RETURNING value) "+
		"SELECT value FROM ins UNION ALL SELECT value FROM "+e.sql.secret+" LIMIT 1", b)
}

// KeptSecret returns the deployment secret kept in the table secret, or
// nil when there is none yet; it never creates one.
func (e *Engine) KeptSecret(ctx context.Context) ([]byte, error) {
	return e.readSecret(ctx, "read", "SELECT value FROM "+e.sql.secret)
}

// readSecret returns the secret this engine read before, or the one q
// gives (nil when none), and keeps it.
func (e *Engine) readSecret(ctx context.Context, what, q string, args ...any) ([]byte, error) {
	e.secretMu.Lock()
	defer e.secretMu.Unlock()
	if e.secret != nil {
		return slices.Clone(e.secret), nil
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	var kept []byte
	err := e.pool.QueryRow(ctx, q, args...).Scan(&kept)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: postgres: %s the secret: %w", what, err)
	}
	e.secret = kept
	return slices.Clone(kept), nil
}
