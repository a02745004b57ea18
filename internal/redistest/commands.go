package redistest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandLog is a go-redis hook that records the names of the commands a
// client sends (lower case; pipelined ones as "pipeline:NAME"). Add it with
// client.AddHook.
type CommandLog struct {
	mu   sync.Mutex
	cmds []string
}

// DialHook implements redis.Hook.
func (l *CommandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (l *CommandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		l.cmds = append(l.cmds, strings.ToLower(cmd.Name()))
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (l *CommandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.mu.Lock()
		for _, c := range cmds {
			l.cmds = append(l.cmds, "pipeline:"+strings.ToLower(c.Name()))
		}
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

// Take returns the commands recorded since the last Take and forgets them.
func (l *CommandLog) Take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cmds
	l.cmds = nil
	return c
}

// CommandStats reads INFO commandstats through c: command name (as Redis
// names it, e.g. "evalsha", "config|resetstat") → calls.
func CommandStats(t testing.TB, c redis.UniversalClient) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	stats := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, calls, ok := strings.Cut(rest, ":calls=")
		if !ok {
			t.Fatalf("commandstats line %q", line)
		}
		calls, _, _ = strings.Cut(calls, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		stats[name] = n
	}
	return stats
}
