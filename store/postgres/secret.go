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
	e.secretMu.Lock()
	defer e.secretMu.Unlock()
	if e.secret != nil {
		return slices.Clone(e.secret), nil
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	b := make([]byte, secretSize)
	_, _ = rand.Read(b)
	var kept []byte
	err := e.pool.QueryRow(ctx, "WITH ins AS (INSERT INTO "+e.sql.secret+" (value) VALUES ($1) ON CONFLICT (one) DO NOTHING RETURNING value) "+
		"SELECT value FROM ins UNION ALL SELECT value FROM "+e.sql.secret+" LIMIT 1", b).Scan(&kept)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: create the secret: %w", err)
	}
	e.secret = kept
	return slices.Clone(kept), nil
}

// KeptSecret returns the deployment secret kept in the table secret, or
// nil when there is none yet; it never creates one.
func (e *Engine) KeptSecret(ctx context.Context) ([]byte, error) {
	e.secretMu.Lock()
	defer e.secretMu.Unlock()
	if e.secret != nil {
		return slices.Clone(e.secret), nil
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	var kept []byte
	err := e.pool.QueryRow(ctx, "SELECT value FROM "+e.sql.secret).Scan(&kept)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: postgres: read the secret: %w", err)
	}
	e.secret = kept
	return slices.Clone(kept), nil
}
