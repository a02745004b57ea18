package redis

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/store"
)

var _ store.Notifier = (*Store)(nil)

// How the notice subscription checks that it is alive: a PING after
// noticePing without a message, and the subscription is made anew when
// the PING has no answer after another noticePing. It ends noticeLinger
// after the last waiter stopped waiting.
const (
	noticePing      = 5 * time.Second
	noticeRetryWait = 250 * time.Millisecond
	noticeLinger    = 10 * time.Second
)

// NoticeChannel is the Pub/Sub channel the complete, release and mark
// unknown scripts publish record ids on: the key prefix + "notices".
func (s *Store) NoticeChannel() string { return s.prefix + "notices" }

// Notices returns the store's notices: one subscription to NoticeChannel
// per Store (a regular SUBSCRIBE on one connection of its own, outside the
// pool; in a Cluster, on one node, which hears every node's PUBLISH),
// fanned out in process by record id. A waiter holds no connection: it
// waits on its Watch.
//
// The subscription runs only while waiters need it (Need) and
// noticeLinger after: Redis sends every completion's notice to every
// subscribed connection, so a gateway where nobody waits would otherwise
// be woken by each completion of the fleet for nothing.
func (s *Store) Notices() store.Notices { return &s.notices }

// redisNotices is a Store's subscription and its fan-out.
type redisNotices struct {
	store.Hub
	live atomic.Bool

	client  goredis.UniversalClient
	channel string
	linger  time.Duration // how long the subscription outlives the last need

	// running mirrors mu's running, for the scripts' notice flag.
	subscribed atomic.Bool

	mu       sync.Mutex
	running  bool      // a subscription goroutine runs
	stopped  bool      // the Store is closing
	needs    int       // waiters waiting now
	lastNeed time.Time // when the last of them stopped
	cancel   context.CancelFunc
	ps       *goredis.PubSub
	done     chan struct{} // closed when the running goroutine ends
}

// Live reports whether the subscription is confirmed and answering.
func (n *redisNotices) Live() bool { return n.live.Load() }

// Need starts the subscription unless it runs, and keeps it until done
// and noticeLinger after.
func (n *redisNotices) Need() func() {
	n.mu.Lock()
	n.needs++
	if !n.running && !n.stopped {
		n.running = true
		n.subscribed.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel, n.done = cancel, make(chan struct{})
		go n.run(ctx, n.done)
	}
	n.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			n.needs--
			n.lastNeed = time.Now()
			n.mu.Unlock()
		})
	}
}

// retire ends the subscription's run when nothing needs it: no waiter
// waits, and none has for noticeLinger. Notices are then no longer live;
// nobody is woken (nobody waits), and a waiter that comes later starts
// the subscription again and is woken when it is up.
func (n *redisNotices) retire() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.needs > 0 || time.Since(n.lastNeed) < n.linger {
		return false
	}
	n.running, n.ps = false, nil
	n.subscribed.Store(false)
	n.live.Store(false)
	return true
}

// flag is the last argument of the scripts that send notices
// (notice.lua): "1" while waiters of this gateway need notices (and
// noticeLinger after), so that every end of a record sends one; else
// "0", and only the records a duplicate marked send one.
func (n *redisNotices) flag() string {
	if n.subscribed.Load() {
		return "1"
	}
	return "0"
}

// stop ends the subscription; the Store is closing.
func (n *redisNotices) stop() {
	n.mu.Lock()
	n.stopped = true
	cancel, ps, done := n.cancel, n.ps, n.done
	n.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	if ps != nil {
		_ = ps.Close() // unblocks a Receive under way
	}
	<-done
	n.down()
}

// run keeps one subscription open until ctx ends or nothing needs it any
// more, making it anew when its connection is lost or stops answering.
func (n *redisNotices) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		ps := n.client.Subscribe(ctx, n.channel)
		n.mu.Lock()
		if n.stopped {
			n.mu.Unlock()
			_ = ps.Close()
			return
		}
		n.ps = ps
		n.mu.Unlock()
		retired := n.receive(ctx, ps)
		if !retired {
			n.down()
		}
		_ = ps.Close()
		if retired {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(noticeRetryWait):
		}
		if n.retire() {
			return
		}
	}
}

// receive delivers the subscription's messages until it fails, stops
// answering its PING, or is retired (it then returns true).
func (n *redisNotices) receive(ctx context.Context, ps *goredis.PubSub) (retired bool) {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, min(noticePing, n.linger))
		var ne net.Error
		switch {
		case ctx.Err() != nil:
			return false
		case n.retire():
			return true
		case err != nil && errors.As(err, &ne) && ne.Timeout() && !pinged:
			if ps.Ping(ctx) != nil {
				return false
			}
			pinged = true
			continue
		case err != nil:
			return false // gone, or silent since the PING: subscribe anew
		}
		pinged = false
		switch m := msg.(type) {
		case *goredis.Message:
			n.Notify(m.Payload)
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				n.up()
			}
		}
	}
}

// up: notices arrive (again). Every waiter looks at its record once, for
// a notice sent while there was no subscription.
func (n *redisNotices) up() {
	if !n.live.Swap(true) {
		n.WakeAll()
	}
}

// down: notices may be lost from now on; waiters poll until up.
func (n *redisNotices) down() {
	if n.live.Swap(false) {
		n.WakeAll()
	}
}
