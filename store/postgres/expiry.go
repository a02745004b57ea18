package postgres

import (
	"context"
	"fmt"
	"time"
)

// Expired records are gone for every call at once (each reads
// expire_at); the sweep deletes them in batches of SweepBatch rows, each
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

// Sweep deletes the expired records, batch by batch, and says how many.
func (e *Engine) Sweep(ctx context.Context) (int64, error) {
	q := "DELETE FROM " + e.sql.records + " WHERE id IN (SELECT id FROM " + e.sql.records +
		" WHERE expire_at <= " + nowSQL + " ORDER BY expire_at LIMIT $1 FOR UPDATE SKIP LOCKED) AND expire_at <= " + nowSQL
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
