package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A store call waits for a free connection of the pool within its
// op_timeout, like the statement itself: when more calls arrive at once
// than the pool's connections answer within op_timeout (about pool_size
// × op_timeout ÷ one call's round trip), the last in the queue fail
// without having had a connection. Their error says so, so that an
// operator sees a pool too small for the burst, not a store that is
// down.

// gotConnKey marks a call's context (see Engine.call): the pool sets
// the mark when it hands the call a connection.
type gotConnKey struct{}

// markAcquired wraps the pool's PrepareConn so that the connection's
// handing out marks the call's context.
func markAcquired(cfg *pgxpool.Config) {
	prepare := cfg.PrepareConn
	cfg.PrepareConn = func(ctx context.Context, c *pgx.Conn) (bool, error) {
		if got, ok := ctx.Value(gotConnKey{}).(*atomic.Bool); ok {
			got.Store(true)
		}
		if prepare == nil {
			return true, nil
		}
		return prepare(ctx, c)
	}
}

// poolWaitErr words err of a call whose context ran out before the pool
// had handed it any connection.
func (e *Engine) poolWaitErr(ctx context.Context, err error) error {
	got, ok := ctx.Value(gotConnKey{}).(*atomic.Bool)
	if !ok || got.Load() || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("no connection of the pool (pool_size %d) came free within op_timeout %s: "+
		"more calls arrived at once than the pool answers in that time (see docs/postgres.md, pool_size): %w",
		e.pool.Config().MaxConns, e.opts.OpTimeout.Round(time.Millisecond), err)
}
