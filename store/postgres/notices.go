package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
)

// Notices: Complete, Release, MarkUnknown and NotDone send
// pg_notify(channel, id) in their transaction, delivered when it
// commits, to every gateway listening on the store's schema. A gateway
// listens on a connection of its own (outside the pool: LISTEN is
// session state, and a pooler in transaction mode would drop it), made
// when the first waiter needs notices and kept while the engine is
// open; it is made anew when it breaks, and waiters poll meanwhile.

type notices struct {
	store.Hub
	e       *Engine
	cfg     *pgx.ConnConfig
	channel string

	once   sync.Once
	live   atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
}

func (n *notices) init(e *Engine, cfg *pgx.ConnConfig) {
	n.e, n.cfg = e, cfg.Copy()
	n.channel = "idemgate." + e.schema
}

// Notices returns the engine's notices.
func (e *Engine) Notices() store.Notices { return &e.notices }

var _ store.Notifier = (*Engine)(nil)

// Need starts the listening connection the first time; it stays.
func (n *notices) Need() func() {
	n.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel, n.done = cancel, make(chan struct{})
		go n.listen(ctx)
	})
	return func() {}
}

// Live reports whether the listening connection is up.
func (n *notices) Live() bool { return n.live.Load() }

func (n *notices) close() {
	n.once.Do(func() {}) // no listener from now on
	if n.cancel != nil {
		n.cancel()
		<-n.done
	}
}

// listen keeps a connection LISTENing, reconnecting after a pause when it
// breaks; every watch is woken when notices start and when they stop.
func (n *notices) listen(ctx context.Context) {
	defer close(n.done)
	for ctx.Err() == nil {
		err := n.session(ctx)
		if n.live.Swap(false) {
			n.WakeAll()
		}
		if ctx.Err() != nil {
			return
		}
		n.e.opts.OnError(fmt.Errorf("store: postgres: notices: %w", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (n *notices) session(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, n.cfg)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{n.channel}.Sanitize()); err != nil {
		return err
	}
	n.live.Store(true)
	n.WakeAll()
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.Notify(msg.Payload)
	}
}
