package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel runs a Redis Sentinel (redis-server --sentinel) on a free
// 127.0.0.1 port that monitors master under name (quorum 1, down after 1s),
// and waits until it reports the master's address. It skips or fails like
// Start when redis-server is missing, and stops in t.Cleanup.
func StartSentinel(t testing.TB, master *Server, name string) *Server {
	t.Helper()
	return StartSentinels(t, master, name, SentinelOptions{N: 1, Quorum: 1})[0]
}

// SentinelOptions configure StartSentinels.
type SentinelOptions struct {
	// N is the number of sentinels; default 3.
	N int
	// Quorum is how many sentinels must agree that the master is down;
	// default a majority of N.
	Quorum int
	// DownAfter is how long the master may be unreachable before a
	// sentinel considers it down; default 1s.
	DownAfter time.Duration
	// FailoverTimeout is Sentinel's failover-timeout (also the pause before
	// the same master is failed over again); default 5s.
	FailoverTimeout time.Duration
	// Replicas is the number of replicas every sentinel must have
	// discovered before StartSentinels returns (see StartReplica).
	Replicas int
}

// StartSentinels runs opts.N sentinels that monitor master under name and
// waits until each reports the master, has discovered opts.Replicas
// replicas and knows the other N-1 sentinels, so that a failover can be
// agreed on right away. Start the replicas (StartReplica) first. The
// sentinels stop in t.Cleanup.
func StartSentinels(t testing.TB, master *Server, name string, opts SentinelOptions) []*Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		Start(t) // skips or fails with the usual message
		return nil
	}
	if opts.N <= 0 {
		opts.N = 3
	}
	if opts.Quorum <= 0 {
		opts.Quorum = opts.N/2 + 1
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout <= 0 {
		opts.FailoverTimeout = 5 * time.Second
	}
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		name, master.Port, opts.Quorum, opts.DownAfter.Milliseconds(), opts.FailoverTimeout.Milliseconds())
	sentinels := make([]*Server, opts.N)
	for i := range sentinels {
		sentinels[i] = &Server{Dir: t.TempDir(), bin: bin, sentinel: conf}
		sentinels[i].launch(t)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range sentinels {
		c := s.Client(t)
		for {
			state, err := sentinelState(ctx, c, name)
			if err == nil && state.port == master.Port && state.replicas >= opts.Replicas && state.others >= opts.N-1 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("redistest: sentinel on %s not ready for master %s: %+v %v", s.Addr, name, state, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return sentinels
}

// sentinelView is what one sentinel knows about a master.
type sentinelView struct {
	port     int // the master's port
	replicas int // replicas known and connected
	others   int // other sentinels known
}

func sentinelState(ctx context.Context, c *redis.Client, name string) (sentinelView, error) {
	var v sentinelView
	addr, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name).StringSlice()
	if err != nil {
		return v, err
	}
	if len(addr) == 2 {
		v.port, _ = strconv.Atoi(addr[1])
	}
	m, err := c.Do(ctx, "SENTINEL", "MASTER", name).Result()
	if err != nil {
		return v, err
	}
	v.others, _ = strconv.Atoi(pairs(m)["num-other-sentinels"])
	replicas, err := c.Do(ctx, "SENTINEL", "REPLICAS", name).Slice()
	if err != nil {
		return v, err
	}
	for _, r := range replicas {
		if f := pairs(r)["flags"]; f != "" && !strings.Contains(f, "disconnected") && !strings.Contains(f, "down") {
			v.replicas++
		}
	}
	return v, nil
}

// pairs reads a Sentinel reply that is a map in RESP3 and a flat list of
// name, value pairs in RESP2.
func pairs(reply any) map[string]string {
	out := map[string]string{}
	switch r := reply.(type) {
	case map[any]any:
		for k, v := range r {
			out[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			out[fmt.Sprint(r[i])] = fmt.Sprint(r[i+1])
		}
	}
	return out
}

// MasterPort asks the sentinel which port the master named name is on now
// (0 when it does not know).
func (s *Server) MasterPort(t testing.TB, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := s.newClient()
	defer c.Close()
	addr, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name).StringSlice()
	if err != nil || len(addr) != 2 {
		return 0
	}
	port, _ := strconv.Atoi(addr[1])
	return port
}

// StartReplica runs a redis-server that replicates master (replicaof) and
// waits until the initial sync is done (master_link_status:up) and the
// replica acknowledges writes (WAIT counts it). It makes the master start
// syncs at once (repl-diskless-sync-delay 0). The replica stops in
// t.Cleanup.
func StartReplica(t testing.TB, master *Server, extraArgs ...string) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := master.Client(t).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatalf("redistest: CONFIG SET repl-diskless-sync-delay on %s: %v", master.Addr, err)
	}
	args := append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}, extraArgs...)
	r := Start(t, args...)
	c := r.Client(t)
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("redistest: replica %s of %s not in sync: %v\n%s", r.Addr, master.Addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A fresh replica acknowledges offsets only from its first periodic
	// ACK on (up to a second later); until then WAIT counts it out. Wait
	// for one acknowledged write (leaving no key behind).
	mc := master.Client(t)
	const probeKey = "redistest:replica-sync"
	if err := mc.Set(ctx, probeKey, "1", 0).Err(); err != nil {
		t.Fatalf("redistest: write to %s: %v", master.Addr, err)
	}
	if err := mc.Del(ctx, probeKey).Err(); err != nil {
		t.Fatalf("redistest: write to %s: %v", master.Addr, err)
	}
	want := 1
	if info, err := mc.Info(ctx, "replication").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "connected_slaves:"); ok {
				want, _ = strconv.Atoi(v)
			}
		}
	}
	if n, err := mc.Do(ctx, "WAIT", want, 10000).Int(); err != nil || n < want {
		t.Fatalf("redistest: replica %s does not acknowledge writes: WAIT %d = %d, %v", r.Addr, want, n, err)
	}
	return r
}

// Role returns the server's replication role ("master", "slave") from
// INFO replication, or "" when it does not answer.
func (s *Server) Role(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := s.newClient()
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "role:"); ok {
			return v
		}
	}
	return ""
}
