package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// StartSentinel runs a Redis Sentinel (redis-server --sentinel) on a free
// 127.0.0.1 port that monitors master under name (quorum 1, down after 1s),
// and waits until it reports the master's address. It skips or fails like
// Start when redis-server is missing, and stops in t.Cleanup.
func StartSentinel(t testing.TB, master *Server, name string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		Start(t) // skips or fails with the usual message
		return nil
	}
	s := &Server{
		Dir: t.TempDir(),
		bin: bin,
		sentinel: fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\n",
			name, master.Port, name),
	}
	s.launch(t)

	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		addr, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name).StringSlice()
		if err == nil && len(addr) == 2 && addr[1] == fmt.Sprint(master.Port) {
			return s
		}
		if ctx.Err() != nil {
			t.Fatalf("redistest: sentinel on %s does not know master %s: %v %v", s.Addr, name, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
