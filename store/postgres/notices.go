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
// commits, to every gateway listening on the store's schema, when
// somebody may wait for the record: a duplicate found it in flight (the
// claim marks the record's waiters, in the statement that found it, so
// the mark and the end of the record are ordered by its row lock), or a
// waiter on some gateway needs notices now (Need keeps that gateway's
// row in the table listeners live). Every other end sends none: a
// NOTIFY takes a lock that serialises the commits of the transactions
// that sent one.
//
// A gateway listens on a connection of its own (outside the pool: LISTEN
// is session state, and a pooler in transaction mode would drop it),
// made when the first waiter needs notices and kept while the engine is
// open; it is made anew when it breaks, and waiters poll meanwhile.

// listenFor is how long a gateway's row in listeners lasts; Need renews
// it every listenRenew while a waiter needs notices.
const (
	listenFor   = 10 * time.Second
	listenRenew = 3 * time.Second
)

type notices struct {
	store.Hub
	e       *Engine
	cfg     *pgx.ConnConfig
	channel string

	once   sync.Once
	live   atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	needers int       // waiters that need notices now
	marked  time.Time // when this gateway's listeners row was last renewed
}

func (n *notices) init(e *Engine, cfg *pgx.ConnConfig) {
	n.e, n.cfg = e, cfg.Copy()
	n.channel = "idemgate." + e.schema
}

// Notices returns the engine's notices.
func (e *Engine) Notices() store.Notices { return &e.notices }

var _ store.Notifier = (*Engine)(nil)

// Need starts the listening connection the first time (it stays), and
// keeps this gateway's row in listeners live until the waiter is done,
// so that every end of a record sends its notice meanwhile.
func (n *notices) Need() func() {
	n.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel, n.done = cancel, make(chan struct{})
		go n.listen(ctx)
		go n.renew(ctx)
	})
	n.mu.Lock()
	n.needers++
	stale := time.Since(n.marked) > listenRenew
	n.mu.Unlock()
	if stale {
		n.mark()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			n.needers--
			n.mu.Unlock()
		})
	}
}

// mark renews this gateway's row in listeners, bounded by the op
// timeout; a failure is reported, and the waiters fall back on the marks
// of the records and on their bounded wait.
func (n *notices) mark() {
	ctx, cancel := context.WithTimeout(context.Background(), n.e.opts.OpTimeout)
	defer cancel()
	at := time.Now()
	if _, err := n.e.pool.Exec(ctx, n.e.sql.listen, n.e.counts.engine, listenFor.Milliseconds()); err != nil {
		n.e.opts.OnError(fmt.Errorf("store: postgres: notices: %w", err))
		return
	}
	n.mu.Lock()
	n.marked = at
	n.mu.Unlock()
}

// renew keeps the row live while waiters need notices.
func (n *notices) renew(ctx context.Context) {
	t := time.NewTicker(listenRenew / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.mu.Lock()
			due := n.needers > 0 && time.Since(n.marked) > listenRenew
			n.mu.Unlock()
			if due {
				n.mark()
			}
		}
	}
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
