package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters only, each a Server.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts a Redis Cluster of n masters (n ≥ 1) on free
// 127.0.0.1 ports, splits the 16384 slots evenly, and waits until every node
// reports cluster_state:ok. It skips or fails like Start when redis-server is
// missing. The nodes stop in t.Cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: StartCluster(%d)", n)
	}
	c := &Cluster{}
	for range n {
		c.Nodes = append(c.Nodes, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := make([]*redis.Client, n)
	for i, node := range c.Nodes {
		clients[i] = node.Client(t)
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", node.Addr, err)
		}
		if err := clients[i].Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %v", node.Addr, err)
		}
	}
	for _, node := range c.Nodes[1:] {
		// The bus port is named: each node's was drawn apart from its
		// client port (see Server.busPort), not redis' default Port+10000.
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", node.Port, node.busPort).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s: %v", node.Addr, err)
		}
	}
	want := []string{"cluster_state:ok", fmt.Sprintf("cluster_known_nodes:%d", n), "cluster_slots_assigned:16384"}
	for i, cl := range clients {
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && containsAll(info, want) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("redistest: cluster node %s not ready: %v\n%s", c.Nodes[i].Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs returns the nodes' addresses (seed addresses for a cluster client).
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Client returns a cluster client for the nodes, closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		DialTimeout:           2 * time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
