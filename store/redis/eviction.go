package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// evictionGuard refuses a Redis whose maxmemory-policy may evict records:
// at Open, on every master, and on every new connection (a reconnect after
// a restart, a failover or a CONFIG SET), unless Options.AllowEviction.
type evictionGuard struct {
	allow bool
	// storedSecret: the store uses the secret kept in Redis, which an
	// allkeys-* policy may evict.
	storedSecret atomic.Bool

	mu     sync.Mutex
	policy string // the last policy read, "" when unknown
}

// errEvicts names the policy that may evict records.
func errEvicts(addr, policy string) error {
	return fmt.Errorf("store: Redis %s has maxmemory-policy %s, which may evict idempotency records and let retries execute again "+
		"(every record has a TTL, so volatile-* policies evict them too): set maxmemory-policy noeviction, "+
		"or set allow_eviction to accept re-executions", addr, policy)
}

// onConnect checks a new connection's server. A server that does not
// answer CONFIG GET (a Sentinel, CONFIG renamed or denied) is let through,
// as at Open.
func (g *evictionGuard) onConnect(ctx context.Context, cn *goredis.Conn) error {
	cfg, err := cn.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return nil
	}
	policy, ok := cfg["maxmemory-policy"]
	if !ok {
		return nil
	}
	g.mu.Lock()
	g.policy = policy
	g.mu.Unlock()
	if policy != "noeviction" && !g.allow {
		return errEvicts(cn.String(), policy)
	}
	if strings.HasPrefix(policy, "allkeys-") && g.storedSecret.Load() {
		return fmt.Errorf("store: Redis %s now has maxmemory-policy %s, which may evict the deployment secret this store uses: "+
			"configure the secret option, or use noeviction or a volatile-* policy", cn.String(), policy)
	}
	return nil
}

// note records a policy Open read.
func (g *evictionGuard) note(policy string) {
	g.mu.Lock()
	g.policy = policy
	g.mu.Unlock()
}

// secretEvictable returns the policy when it may evict the deployment
// secret, a key without TTL: allkeys-*.
func (g *evictionGuard) secretEvictable() (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.policy, strings.HasPrefix(g.policy, "allkeys-")
}
