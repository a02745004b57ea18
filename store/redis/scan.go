package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/idemgate/idemgate/store"
	goredis "github.com/redis/go-redis/v9"
)

// scanCount is the COUNT hint of every SCAN page.
const scanCount = 500

// ScanIDs calls fn with the id of every record under the store's prefix, in
// no particular order, using SCAN over the whole key space (on every master in Cluster mode; fn is
// never called concurrently). Like
// SCAN it may report an id more than once and may miss records created or
// deleted meanwhile. Each SCAN page has its own OpTimeout deadline; ctx
// bounds the whole walk. An error from fn stops the walk and is returned.
// List, served from the state indexes, is the cheaper way to list records;
// ScanIDs remains for tests and for checking the indexes against the data.
func (s *Store) ScanIDs(ctx context.Context, fn func(id string) error) error {
	match := globEscape(s.prefix) + "{???}*"
	walk := func(ctx context.Context, c goredis.UniversalClient) error {
		var cursor uint64
		for {
			pctx, cancel := context.WithTimeout(ctx, s.opTimeout)
			keys, next, err := c.Scan(pctx, cursor, match, scanCount).Result()
			cancel()
			if err != nil {
				return fmt.Errorf("store: scan: %w", err)
			}
			for _, k := range keys {
				id, ok := s.idFromKey(k)
				if !ok {
					continue
				}
				if err := fn(id); err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		// ForEachMaster scans the masters concurrently: serialise fn, and
		// stop calling it after its first error.
		var (
			mu      sync.Mutex
			stopped error
		)
		inner := fn
		fn = func(id string) error {
			mu.Lock()
			defer mu.Unlock()
			if stopped != nil {
				return stopped
			}
			stopped = inner(id)
			return stopped
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			err := walk(ctx, c)
			if err != nil {
				cancel() // the other masters' walks end too
			}
			return err
		})
		mu.Lock()
		defer mu.Unlock()
		if stopped != nil {
			return stopped
		}
		return err
	}
	return walk(ctx, s.client)
}

// idFromKey is the inverse of Key. Index keys and foreign keys are not
// record keys.
func (s *Store) idFromKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix)
	if !ok || len(rest) < 6 || rest[0] != '{' || rest[4] != '}' {
		return "", false
	}
	id := rest[5:]
	return id, store.ValidID(id) && Shard(id) == rest[1:4]
}

// globEscape quotes the glob metacharacters of a SCAN MATCH pattern.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
