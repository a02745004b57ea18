package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/idemgate/idemgate/store"
	goredis "github.com/redis/go-redis/v9"
)

// WaitShortfall reports a WAIT after a claim or a completion that returned
// before Options.WaitReplicas replicas had acknowledged the write. The write
// itself succeeded and the call did not fail: until a replica has it, a
// failover may lose it.
type WaitShortfall struct {
	Op     string // "claim" or "complete"
	ID     string // the record id
	Acked  int    // replicas that acknowledged within the timeout
	Wanted int    // Options.WaitReplicas
	Err    error  // set when WAIT itself failed or was skipped
	// Refused says that the claim was released and Claim failed with
	// ErrReplicasShort (Options.WaitStrict); never set for a completion.
	Refused bool
}

// waitedOp says which calls run waits in the same round trip as their
// script: completions (losing one turns a stored result back into an
// in-flight claim, held as outcome unknown later). Claims wait in
// runClaim, only when they took the record.
func waitedOp(op string) bool { return op == "complete" }

// refuseShort releases a claim that too few replicas acknowledged and
// returns the error that says so. The release does not wait; it gets a
// round trip of its own, whatever the claim's own deadline left.
func (s *Store) refuseShort(req store.ClaimRequest, ws WaitShortfall) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
	defer cancel()
	err := fmt.Errorf("store: claim %s: %d of %d replicas acknowledged: %w", req.ID, ws.Acked, ws.Wanted, store.ErrReplicasShort)
	if _, rerr := s.Release(ctx, req.ID, req.Token, req.TTL); rerr != nil {
		return fmt.Errorf("%w (and releasing it failed: %v)", err, rerr)
	}
	return err
}

func (o Options) checkWait() error {
	switch {
	case o.WaitReplicas < 0:
		return fmt.Errorf("store: wait_replicas %d is negative", o.WaitReplicas)
	case o.WaitStrict && o.WaitReplicas == 0:
		return errors.New("store: wait strict needs WaitReplicas above 0")
	case o.WaitTimeout < 0:
		return fmt.Errorf("store: negative wait timeout %v", o.WaitTimeout)
	case o.WaitReplicas > 0 && cmp.Or(o.WaitTimeout, DefaultWaitTimeout) >= cmp.Or(o.OpTimeout, store.DefaultOpTimeout):
		return fmt.Errorf("store: wait timeout %v must be shorter than the op timeout %v",
			cmp.Or(o.WaitTimeout, DefaultWaitTimeout), cmp.Or(o.OpTimeout, store.DefaultOpTimeout))
	}
	return nil
}

func (s *Store) shortWait(op, id string, acked int, err error) {
	if s.onWaitShort != nil {
		s.onWaitShort(WaitShortfall{Op: op, ID: id, Acked: acked, Wanted: s.wait, Err: err})
	}
}

// EvictionCheck is what Open learnt about one Redis master's eviction
// policy.
type EvictionCheck struct {
	// Addr names the master: host:port, or "sentinel master NAME".
	Addr string
	// Policy is the master's maxmemory-policy; "" when Err is set.
	Policy string
	// MaxMemory is the master's maxmemory in bytes (0: no limit).
	MaxMemory int64
	// Err says why the policy could not be read: CONFIG disabled or
	// renamed, or not allowed to the user.
	Err error
}

// Evicts reports whether the policy may evict records: every policy but
// noeviction. The volatile-* policies are no exception: they evict keys
// that carry a TTL, and every record (an in-flight claim included) carries
// one. An evicted claim lets the next retry execute again. maxmemory 0 (no
// limit) never evicts, but a later CONFIG SET maxmemory would arm the
// policy, so it is reported all the same.
func (c EvictionCheck) Evicts() bool {
	return c.Err == nil && c.Policy != "noeviction"
}

// checkEviction reads maxmemory-policy (and maxmemory) from every master
// and hands each result to report.
func (s *Store) checkEviction(opts Options, report func(EvictionCheck)) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
	defer cancel()
	check := func(ctx context.Context, c *goredis.Client, addr string) EvictionCheck {
		ec := EvictionCheck{Addr: addr}
		cfg, err := c.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil {
			ec.Err = fmt.Errorf("CONFIG GET maxmemory-policy: %w", err)
			return ec
		}
		policy, ok := cfg["maxmemory-policy"]
		if !ok {
			ec.Err = errors.New("CONFIG GET maxmemory-policy: not reported")
			return ec
		}
		ec.Policy = policy
		ec.MaxMemory, _ = strconv.ParseInt(cfg["maxmemory"], 10, 64)
		return ec
	}
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		var mu sync.Mutex
		var checks []EvictionCheck
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
			ec := check(ctx, node, node.Options().Addr)
			mu.Lock()
			checks = append(checks, ec)
			mu.Unlock()
			return nil
		})
		if err != nil && len(checks) == 0 {
			checks = append(checks, EvictionCheck{Addr: strings.Join(opts.Addrs, ","), Err: err})
		}
		for _, ec := range checks {
			report(ec)
		}
	case *goredis.Client:
		addr := c.Options().Addr
		if opts.MasterName != "" {
			addr = "sentinel master " + opts.MasterName
		}
		report(check(ctx, c, addr))
	}
}
