package redis

import (
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
)

// The store tests also run the scripts on miniredis, an in-process
// Redis-compatible server whose clock a test can set.
//
// miniredis v2.40.0 runs the scripts unchanged: its Lua (gopher-lua, Lua 5.1
// semantics, numbers are float64 as in Redis, exact for millisecond times)
// supports goredis.call with TIME, HGET, HMGET (false for missing fields),
// multi-field HSET, HDEL, HINCRBY and PEXPIRE, returns binary-safe strings,
// and caches scripts for EVALSHA. Two differences matter here: TTLs only
// advance when told to (handled by the ticker below), and every script run
// builds a fresh Lua state, so a call costs about a millisecond instead of
// tens of microseconds.

// embeddedTick is how often the miniredis server's key TTLs are advanced.
// miniredis only expires keys when told to; expiry is therefore up to one
// tick late. Leases are unaffected: they compare against TIME.
const embeddedTick = time.Second

// openMiniredis starts miniredis on a random 127.0.0.1 port and connects
// to it with the same client options and scripts as Open. Addrs,
// MasterName, Cluster, Username, Password, DB and TLS are ignored. Close
// stops the server.
func openMiniredis(opts Options) (*Store, *miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, nil, fmt.Errorf("store: start miniredis: %w", err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(embeddedTick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	shutdown := func() {
		close(stop)
		<-done
		m.Close()
	}

	uo := Options{
		Addrs:       []string{m.Addr()},
		PoolSize:    opts.PoolSize,
		DialTimeout: opts.DialTimeout,
		OpTimeout:   opts.OpTimeout,
	}.universalOptions()
	client := goredis.NewClient(uo.Simple())
	s := New(client, opts.KeyPrefix, opts.OpTimeout)
	s.onClose = shutdown
	if err := s.start(opts.DialTimeout); err != nil {
		_ = s.Close()
		return nil, nil, err
	}
	return s, m, nil
}
