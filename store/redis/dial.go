package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// dialer returns the Redis client's dialer: go-redis's own (TCP, TLS with
// tlsConf), except that a failed dial returns, instead of its error, a
// connection whose every read and write fails with that error. The caller
// gets the same error (from the connection's handshake), but go-redis's
// pool does not count it as a failed dial: after PoolSize failed dials the
// pool stops dialing and tries again only once a second, so a Redis that
// is back (or a new master that Sentinel or Cluster names) would be used
// up to a second late. With this dialer every call dials again, and the
// first call after the switch succeeds.
//
// The connections it makes are peeked by go-redis's pool only when a peek
// can tell something (see checkedConn).
func dialer(timeout time.Duration, tlsConf *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := goredis.NewDialer(&goredis.Options{DialTimeout: timeout, TLSConfig: tlsConf})
	h := new(connHealth)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return failedConn{err: err}, nil
		}
		if sc, ok := conn.(syscall.Conn); ok {
			c := &checkedConn{Conn: conn, sys: sc, health: h}
			c.used.Store(time.Now().UnixNano())
			return c, nil
		}
		return conn, nil // TLS: go-redis's pool never peeks it
	}
}

// Peeks of pooled connections: a connection used within freshConn, while
// no connection of the client failed within suspectFor, is handed out
// without one.
const (
	freshConn  = time.Second
	suspectFor = time.Second
)

// connHealth is what the connections of one client share: when one of
// them last failed.
type connHealth struct {
	failed atomic.Int64 // unix ns of the last read or write error; 0: none
}

// checkedConn is a TCP connection to Redis that skips go-redis's
// per-checkout health check while that check cannot find anything. The
// pool peeks every connection it hands out (a non-blocking recvfrom with
// MSG_PEEK, after clearing its deadlines), to drop one that Redis closed
// while it sat idle. For a connection that answered moments ago, and when
// no connection of the client has failed lately, the peek finds nothing
// but costs a system call on every command. When a connection fails (Redis
// restarted or closed it), go-redis retries the command, which every store
// script allows, on another connection; by then this connection has marked
// the client suspect, so for the next second every checkout peeks again and
// the pool drops the dead connections before a retry can meet them. A
// connection idle for longer than freshConn is always peeked, as TLS
// connections never are.
type checkedConn struct {
	net.Conn
	sys    syscall.Conn
	health *connHealth
	used   atomic.Int64 // unix ns of the last read or write
}

func (c *checkedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.note(err)
	return n, err
}

func (c *checkedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.note(err)
	return n, err
}

// note records a read or write: its time, and a failure for the client.
// A deadline that ran out is not a dead connection.
func (c *checkedConn) note(err error) {
	now := time.Now().UnixNano()
	c.used.Store(now)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		c.health.failed.Store(now)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// needsPeek reports whether the pool's peek could find something: the
// connection sat idle, or some connection of the client failed lately.
func (c *checkedConn) needsPeek() bool {
	now := time.Now().UnixNano()
	return now-c.used.Load() >= int64(freshConn) || now-c.health.failed.Load() < int64(suspectFor)
}

// SyscallConn gives go-redis's health check the socket, or, when the peek
// is not needed, a stand-in whose Read reports "nothing to read, not
// closed" without a system call (and without an allocation: it is the
// connection itself). Its Write and Control are the socket's.
func (c *checkedConn) SyscallConn() (syscall.RawConn, error) {
	if c.needsPeek() {
		return c.sys.SyscallConn()
	}
	return (*unpeekedRaw)(c), nil
}

// unpeekedRaw is a fresh connection's socket as the health check sees it.
type unpeekedRaw checkedConn

func (*unpeekedRaw) Read(func(fd uintptr) bool) error { return nil }

func (r *unpeekedRaw) Write(f func(fd uintptr) bool) error {
	raw, err := r.sys.SyscallConn()
	if err != nil {
		return err
	}
	return raw.Write(f)
}

func (r *unpeekedRaw) Control(f func(fd uintptr)) error {
	raw, err := r.sys.SyscallConn()
	if err != nil {
		return err
	}
	return raw.Control(f)
}

// Interface guards
var (
	_ syscall.Conn    = (*checkedConn)(nil)
	_ syscall.RawConn = (*unpeekedRaw)(nil)
)

// failedConn is a connection that was never made: every read and write
// returns the dial's error.
type failedConn struct{ err error }

func (c failedConn) Read([]byte) (int, error)         { return 0, c.err }
func (c failedConn) Write([]byte) (int, error)        { return 0, c.err }
func (c failedConn) Close() error                     { return nil }
func (c failedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c failedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c failedConn) SetDeadline(time.Time) error      { return nil }
func (c failedConn) SetReadDeadline(time.Time) error  { return nil }
func (c failedConn) SetWriteDeadline(time.Time) error { return nil }
