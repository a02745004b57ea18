package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redisServer is a throw-away redis-server on loopback (started like the
// tests' servers), with a client for INFO.
type redisServer struct {
	*redistest.Server
	client *redis.Client
}

func startRedis(dir string) (*redisServer, error) {
	rdir := filepath.Join(dir, "redis")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, err
	}
	s, err := redistest.Launch(rdir, "--protected-mode", "yes")
	if err != nil {
		return nil, err
	}
	return &redisServer{Server: s, client: redis.NewClient(&redis.Options{Addr: s.Addr, DisableIdentity: true})}, nil
}

func (r *redisServer) stop() {
	_ = r.client.Close()
	r.Stop()
}

func (r *redisServer) pid() int { return r.Pid() }

// info returns one field of an INFO section (e.g. server, redis_version).
func (r *redisServer) info(section, field string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := r.client.Info(ctx, section).Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// roundTripP50 returns the median time of n EVALSHA calls of a script
// that only returns, sent one after the other, each idle before it
// (0: back to back): one bare Redis round trip of the kind the gateway
// makes, on this machine, from a process as busy or as idle as the
// gateway is between its round trips.
func (r *redisServer) roundTripP50(n int, idle time.Duration) time.Duration {
	script := redis.NewScript("return 1")
	lat := make([]time.Duration, 0, n)
	for range n {
		if idle > 0 {
			time.Sleep(idle)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		began := time.Now()
		err := script.Run(ctx, r.client, []string{"bench:rt"}).Err()
		cancel()
		if err != nil {
			return 0
		}
		lat = append(lat, time.Since(began))
	}
	slices.Sort(lat)
	return percentile(lat, 0.5)
}

// roundTrips measures a bare round trip back to back, and after 1 ms idle
// with this process's GOMAXPROCS and with GOMAXPROCS=1: on a small machine
// the Go scheduler's idle threads (woken to look for work whenever a
// goroutine wakes) take the CPU Redis needs to answer, which shows as the
// difference between the last two.
func (r *redisServer) roundTrips() roundTrips {
	rt := roundTrips{procs: runtime.GOMAXPROCS(0)}
	rt.hot = r.roundTripP50(1000, 0)
	rt.idle = r.roundTripP50(500, time.Millisecond)
	prev := runtime.GOMAXPROCS(1)
	rt.idleOne = r.roundTripP50(500, time.Millisecond)
	runtime.GOMAXPROCS(prev)
	return rt
}

// roundTrips are the medians of bare EVALSHA round trips.
type roundTrips struct {
	hot     time.Duration // back to back
	idle    time.Duration // after 1 ms idle, GOMAXPROCS procs
	idleOne time.Duration // after 1 ms idle, GOMAXPROCS 1
	procs   int
}

// commandStats are Redis's INFO commandstats counters summed: every
// command it ran (those a script runs inside Redis are counted one by
// one, as commandstats counts them), and of those the script calls
// (EVALSHA, EVAL, FCALL and their read-only forms), which are the
// gateway's round trips as long as each store step is one script.
type commandStats struct{ commands, scripts int64 }

func (a commandStats) sub(b commandStats) commandStats {
	return commandStats{commands: a.commands - b.commands, scripts: a.scripts - b.scripts}
}

func (r *redisServer) commandStats() (commandStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := r.client.Info(ctx, "commandstats").Result()
	if err != nil {
		return commandStats{}, err
	}
	return parseCommandStats(s), nil
}

// scriptCommands are the commands that run a script.
var scriptCommands = map[string]bool{"evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true, "fcall": true, "fcall_ro": true}

// parseCommandStats sums the calls of INFO commandstats
// ("cmdstat_evalsha:calls=2,usec=35,usec_per_call=17.50,..."), leaving out
// INFO itself (the benchmark's own reads of these counters).
func parseCommandStats(info string) commandStats {
	var st commandStats
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil || !strings.HasPrefix(fields, "calls=") {
			continue
		}
		st.commands += n
		if scriptCommands[name] {
			st.scripts += n
		}
	}
	return st
}
