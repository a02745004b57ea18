package postgres

import (
	"context"
	"fmt"
	"time"
)

// Expired records (and tombstones, and twin entries) are gone for every
// call at once (each reads expire_at); the sweep deletes them in batches of SweepBatch rows, each
// its own short transaction that skips rows a claim holds, so autovacuum
// reuses their space and the table stays bounded.

func (e *Engine) sweepLoop() {
	defer e.done.Done()
	t := time.NewTicker(e.opts.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			if _, err := e.Sweep(context.Background()); err != nil {
				e.opts.OnError(err)
			}
		}
	}
}

// Sweep deletes the expired records, then the expired tombstones and twin
// entries, then the counts of records gone (counts.go), batch by batch,
// and says how many rows.
func (e *Engine) Sweep(ctx context.Context) (int64, error) {
	var total int64
	for _, t := range [...]struct{ table, key string }{{e.sql.records, "id"}, {e.sql.tombstones, "id"}, {e.sql.twins, "twin"}} {
		n, err := e.sweep(ctx, t.table, t.key)
		total += n
		if err != nil {
			return total, err
		}
	}
	n, err := e.sweepWith(ctx, e.sql.sweepCount)
	total += n
	if err != nil {
		return total, err
	}
	if _, err := e.pool.Exec(ctx, e.sql.sweepListeners); err != nil {
		return total, fmt.Errorf("store: postgres: expiry sweep: %w", err)
	}
	return total, nil
}

// sweep deletes the expired rows of table (keyed by key).
func (e *Engine) sweep(ctx context.Context, table, key string) (int64, error) {
	return e.sweepWith(ctx, "DELETE FROM "+table+" WHERE "+key+" IN (SELECT "+key+" FROM "+table+
		" WHERE expire_at <= "+nowSQL+" ORDER BY expire_at LIMIT $1 FOR UPDATE SKIP LOCKED) AND expire_at <= "+nowSQL)
}

// sweepWith runs q, a DELETE of at most $1 rows, until it deletes fewer.
func (e *Engine) sweepWith(ctx context.Context, q string) (int64, error) {
	var total int64
	for {
		select {
		case <-e.stop:
			return total, nil
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*e.opts.OpTimeout)
		tag, err := e.pool.Exec(cctx, q, e.opts.SweepBatch)
		cancel()
		if err != nil {
			return total, fmt.Errorf("store: postgres: expiry sweep: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(e.opts.SweepBatch) {
			return total, nil
		}
	}
}
