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
// the PING has no answer after another noticePing.
const (
	noticePing      = 5 * time.Second
	noticeRetryWait = 250 * time.Millisecond
)

// NoticeChannel is the Pub/Sub channel the complete, release and mark
// unknown scripts publish record ids on: the key prefix + "notices".
func (s *Store) NoticeChannel() string { return s.prefix + "notices" }

// Notices returns the store's notices: one subscription to NoticeChannel
// per Store (a regular SUBSCRIBE on one connection of its own, outside the
// pool; in a Cluster, on one node, which hears every node's PUBLISH),
// started on first use and kept until Close, fanned out in process by
// record id. A waiter holds no connection: it waits on its Watch.
func (s *Store) Notices() store.Notices {
	s.notices.start(s.client, s.NoticeChannel())
	return &s.notices
}

// redisNotices is a Store's subscription and its fan-out.
type redisNotices struct {
	store.Hub
	live atomic.Bool

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	ps      *goredis.PubSub
	done    chan struct{}
}

// Live reports whether the subscription is confirmed and answering.
func (n *redisNotices) Live() bool { return n.live.Load() }

func (n *redisNotices) start(client goredis.UniversalClient, channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started || n.stopped {
		return
	}
	n.started = true
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan struct{})
	go n.run(ctx, client, channel)
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

// run keeps one subscription open until ctx ends, making it anew when its
// connection is lost or stops answering.
func (n *redisNotices) run(ctx context.Context, client goredis.UniversalClient, channel string) {
	defer close(n.done)
	for ctx.Err() == nil {
		ps := client.Subscribe(ctx, channel)
		n.mu.Lock()
		if n.stopped {
			n.mu.Unlock()
			_ = ps.Close()
			return
		}
		n.ps = ps
		n.mu.Unlock()
		n.receive(ctx, ps)
		n.down()
		_ = ps.Close()
		select {
		case <-ctx.Done():
		case <-time.After(noticeRetryWait):
		}
	}
}

// receive delivers the subscription's messages until it fails or stops
// answering its PING.
func (n *redisNotices) receive(ctx context.Context, ps *goredis.PubSub) {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, noticePing)
		var ne net.Error
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && errors.As(err, &ne) && ne.Timeout() && !pinged:
			if ps.Ping(ctx) != nil {
				return
			}
			pinged = true
			continue
		case err != nil:
			return // gone, or silent since the PING: subscribe anew
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
