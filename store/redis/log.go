package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// redisLogger routes the Redis client's own messages (go-redis logs plain
// text to stderr by default) into Caddy's logger, under
// http.handlers.idempotency.redis, at a level read from the message.
type redisLogger struct {
	log func() *zap.Logger
}

var redisLoggerOnce sync.Once

// installRedisLogger makes go-redis log through Caddy's current default
// logger, once per process.
func installRedisLogger() {
	redisLoggerOnce.Do(func() {
		goredis.SetLogger(redisLogger{log: func() *zap.Logger { return handlerLog().Named("redis") }})
	})
}

// Printf logs one message of the client.
func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if ce := l.log().Check(redisLogLevel(msg), msg); ce != nil {
		ce.Write()
	}
}

// redisLogLevel picks the level of a go-redis message:
//   - error: a recovered panic;
//   - info: a topology change (a new master named by Sentinel, a new
//     sentinel, moved Cluster slots);
//   - debug: a failed dial or master lookup, which repeats for every
//     attempt while Redis is down: the outage itself is logged once at
//     warn when it starts and once when it ends (see availabilityReporter);
//   - warn: anything else.
func redisLogLevel(msg string) zapcore.Level {
	switch {
	case strings.Contains(msg, "panic"):
		return zapcore.ErrorLevel
	case strings.Contains(msg, "sentinel: new master"), strings.Contains(msg, "sentinel: discovered new sentinel"),
		strings.Contains(msg, "sentinel: selected"), strings.Contains(msg, "migrated to"),
		strings.Contains(msg, "shard state changed"):
		return zapcore.InfoLevel
	case strings.Contains(msg, "failed to dial"), strings.Contains(msg, "GetMasterAddrByName"),
		strings.Contains(msg, "failed to close"), strings.Contains(msg, "sentinel: ignore addr"):
		return zapcore.DebugLevel
	default:
		return zapcore.WarnLevel
	}
}
