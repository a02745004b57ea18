package redis

import (
	"context"
	"crypto/tls"
	"net"
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
func dialer(timeout time.Duration, tlsConf *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := goredis.NewDialer(&goredis.Options{DialTimeout: timeout, TLSConfig: tlsConf})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return failedConn{err: err}, nil
		}
		return conn, nil
	}
}

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
