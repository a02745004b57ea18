package redis

import (
	"context"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestClaimRightAfterRedisReturns: however many claims failed while Redis
// was down, the first claim after it answers again succeeds. (go-redis's
// pool stops dialing after PoolSize failed dials and tries again only once
// a second; the store's dialer keeps it dialing.)
func TestClaimRightAfterRedisReturns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{srv.Addr}, PoolSize: 2, OpTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	srv.Stop()
	for range 10 {
		if _, err := s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok")); err == nil {
			t.Fatal("claim with Redis stopped succeeded")
		}
	}
	srv.Restart(t) // returns once Redis answers
	if _, err := s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok")); err != nil {
		t.Fatalf("first claim after Redis answers again: %v", err)
	}
}

// TestCallsAfterConnectionsDropped: Redis closes every connection of a
// pool that was just used (a restart, CLIENT KILL); the next claim still
// succeeds. The pool hands out connections used moments ago without
// peeking at them (checkedConn), so the claim first meets a dead one; the
// failure makes every later checkout peek, and go-redis's retry then finds
// a live connection instead of the next dead one.
func TestCallsAfterConnectionsDropped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{srv.Addr}, PoolSize: 8, OpTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DisableIdentity: true})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	for round := range 3 {
		// Fill the pool with connections used just now: blocking calls
		// at once, one connection each.
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				if err := s.Client().BLPop(ctx, 100*time.Millisecond, "idemgate-test:none").Err(); err != goredis.Nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := s.Client().PoolStats().IdleConns; n < 3 {
			t.Fatalf("round %d: %d idle connections in the pool, want at least 3 (one more than go-redis's retries)", round, n)
		}
		killed, err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Result()
		if err != nil || killed < 3 {
			t.Fatalf("round %d: CLIENT KILL: %d, %v", round, killed, err)
		}
		if _, err := s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok")); err != nil {
			t.Fatalf("round %d: first claim after Redis closed the pool's connections: %v", round, err)
		}
		// Leave the suspect window, so the next round starts with fresh
		// connections that are not peeked.
		time.Sleep(suspectFor + 100*time.Millisecond)
	}
}

// TestCheckedConnPeeks: go-redis's health check reaches the socket only
// when a peek could find something.
func TestCheckedConnPeeks(t *testing.T) {
	t.Parallel()
	now := time.Now().UnixNano()
	tests := []struct {
		name         string
		used, failed int64 // unix ns; 0: never
		peek         bool
	}{
		{"used just now", now, 0, false},
		{"used just now, another connection failed long ago", now, now - int64(2*suspectFor), false},
		{"idle for longer than freshConn", now - int64(freshConn) - int64(time.Millisecond), 0, true},
		{"used just now, another connection failed just now", now, now, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := &countingSocket{}
			c := &checkedConn{sys: sock, health: new(connHealth)}
			c.used.Store(tt.used)
			c.health.failed.Store(tt.failed)
			raw, err := c.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			if err := raw.Read(func(uintptr) bool { return true }); err != nil {
				t.Fatal(err)
			}
			if got := sock.reads > 0; got != tt.peek {
				t.Errorf("peeked: %v, want %v", got, tt.peek)
			}
		})
	}
	// A failed read marks the client suspect; a deadline that ran out does not.
	h := new(connHealth)
	c := &checkedConn{health: h}
	c.note(os.ErrDeadlineExceeded)
	if h.failed.Load() != 0 {
		t.Error("a read deadline marked the client suspect")
	}
	c.note(io.EOF)
	if h.failed.Load() == 0 {
		t.Error("a dead connection did not mark the client suspect")
	}
}

// countingSocket is a syscall.Conn whose raw Read counts its calls.
type countingSocket struct{ reads int }

func (s *countingSocket) SyscallConn() (syscall.RawConn, error) { return countingRaw{s}, nil }

type countingRaw struct{ s *countingSocket }

func (r countingRaw) Control(func(uintptr)) error { return nil }
func (r countingRaw) Read(f func(uintptr) bool) error {
	r.s.reads++
	f(0)
	return nil
}
func (r countingRaw) Write(func(uintptr) bool) error { return nil }
