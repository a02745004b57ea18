// Command bench measures what the idempotency gateway costs compared to
// plain Caddy reverse_proxy, on one machine, in one run (`make bench`).
//
// It starts, all on 127.0.0.1:
//
//   - an upstream API: every POST answers 201 with a JSON body of about
//     300 bytes;
//   - a throw-away redis-server when one is installed, else the gateway's
//     Redis site uses its embedded store too (the output says which);
//   - ONE bin/idemgate process whose Caddyfile has four sites: plain
//     reverse_proxy, the gateway (idempotency + reverse_proxy) on Redis,
//     the same on the embedded store, and a static `respond` (the ceiling
//     a replay could reach);
//
// and drives them with wrk when it is installed (a Lua script gives every
// request its own Idempotency-Key), else with its own closed-loop HTTP/1.1
// load generator. The variants are:
//
//	plain             POST /v1/deals through reverse_proxy only
//	execute           POST /v1/deals through the gateway on Redis, every request a new key
//	replay            the same with keys from a fixed set of completed records
//	conflict          the same with keys whose records are held as outcome unknown (409)
//	passthrough       POST /v1/notes through the gateway: no route matches
//	static            POST /v1/deals answered by Caddy's respond (the ceiling)
//	embedded-execute  execute through the gateway on the embedded store
//	embedded-replay   replay through the gateway on the embedded store
//	pg-execute        execute through the gateway on a throw-away Postgres cluster
//	pg-replay         replay through the gateway on that cluster
//
// (the pg-* variants run when Postgres is installed, as the tests find
// it, see internal/pgtest; the output says when they are skipped) and
// the set two-plain, two-execute, two-replay, two-embedded-execute,
// two-embedded-replay, two-pg-execute, two-pg-replay and two-static: the same at 2 connections (-conns2),
// where requests barely queue for the CPUs, so p50 over plain is the
// latency the gateway adds and the CPU per request what it costs (a table
// of its own); and, when taskset is installed and there are at least 2 CPUs, the set
// pinned-plain, pinned-execute, pinned-replay, pinned-passthrough and
// pinned-static: the same against a second gateway process pinned to CPU 0
// while the load generator, the upstream and Redis run on CPU 1, which
// shows the gateway's own cost without its neighbours.
//
// Every round runs each variant of a set for a fixed duration, in an order
// rotated from round to round (A B C, B C A, ...), so drift of the shared
// machine spreads over all variants. The report gives per variant the
// medians over the rounds of req/s, p50 and p99 latency, the Redis
// commands per request (INFO commandstats, commands run inside scripts
// included) and script calls per request, and the CPU time per request of
// the gateway, Redis and the load generator with the upstream
// (/proc/PID/stat); then the ratios (execute/plain, replay/static,
// passthrough/plain, embedded/redis) and the targets. Then it sends -keys
// distinct keys and reports the gateway's resident memory before and
// after. The same report is written to -out (bench/results.md).
//
// Before the load, the wait measurement: -wait-rounds times, a first
// request to POST /v1/slow (the upstream takes 300 ms; the route waits,
// on_in_flight: wait) and -waiters duplicates sent together while it runs,
// each on a connection of its own. It reports how long after the upstream
// answered the duplicates got the replay (median, p90, max) and what Redis
// ran per waiting request. -wait-only runs only this (`make bench
// BENCHFLAGS=-wait-only`).
//
// Usage (after `make build`):
//
//	go run ./bench -gateway bin/idemgate [-rounds 5] [-duration 2s] [-conns 64] [-conns2 2] [-sets shared,pinned,two] [-load auto|wrk|go]
//
// Every phase is bounded in time; the whole run takes about 3-4 minutes.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

type options struct {
	gateway      string
	rounds       int
	duration     time.Duration
	warmup       time.Duration
	conns        int
	conns2       int // the two set's connections
	threads      int
	keys         int
	keysMax      time.Duration
	out          string
	profile      string
	variants     string
	sets         string
	store        string
	load         string
	quiet        bool
	gatewayProcs int // GOMAXPROCS of the gateway; 0: the default
	keep         bool
	// idleRounds of plain and execute on one connection, 1s each.
	idleRounds int
	// waiters duplicates wait for one slow call, waitRounds times (0:
	// skip); waitOnly runs nothing else.
	waiters, waitRounds int
	waitOnly            bool
	// pgPool is the Postgres site's pool size (0: the store's default).
	pgPool int
}

func main() {
	var o options
	flag.StringVar(&o.gateway, "gateway", "bin/idemgate", "the gateway binary (make build)")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds; each runs every variant of a set once")
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "load duration of one variant in one round (whole seconds with wrk)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load per variant before a set's first round")
	flag.IntVar(&o.conns, "conns", 64, "keep-alive connections (shared and pinned sets)")
	flag.IntVar(&o.conns2, "conns2", 2, "keep-alive connections of the two set")
	flag.IntVar(&o.threads, "threads", min(2, runtime.NumCPU()), "wrk threads (1 in the pinned set)")
	flag.IntVar(&o.idleRounds, "idle-rounds", 3, "rounds of plain and execute on one connection (1s each)")
	flag.IntVar(&o.keys, "keys", 100000, "distinct keys sent for the memory measurement (0: skip)")
	flag.DurationVar(&o.keysMax, "keys-max", 60*time.Second, "time limit of the memory measurement")
	flag.StringVar(&o.out, "out", "bench/results.md", "markdown report (\"\": none)")
	flag.StringVar(&o.profile, "profile", "", "directory for CPU profiles of the gateway, one per variant, taken after each set's rounds")
	flag.StringVar(&o.variants, "variants", "", "comma-separated variants to run (default all)")
	flag.StringVar(&o.sets, "sets", "", "comma-separated sets to run: shared, pinned, two (default all)")
	flag.StringVar(&o.store, "store", "auto", "the gateway site's store: auto (redis-server when installed), redis, or embedded")
	flag.StringVar(&o.load, "load", "auto", "load generator: auto (wrk when installed), wrk, or go")
	flag.IntVar(&o.gatewayProcs, "gateway-procs", 0, "GOMAXPROCS of the gateway (0: Go's default, one per CPU it may run on)")
	flag.BoolVar(&o.quiet, "quiet-logs", false, "run the gateway with log level WARN (no per-decision log line)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (configs and logs)")
	// 32: the most duplicates of one key the gateway lets wait; more get
	// the in-flight 409 at once (docs/capacity.md).
	flag.IntVar(&o.waiters, "waiters", 32, "duplicates waiting for one slow call in the wait measurement, at most 32 (0: skip)")
	flag.IntVar(&o.waitRounds, "wait-rounds", 5, "rounds of the wait measurement")
	flag.IntVar(&o.pgPool, "pg-pool", 0, "connections of the Postgres site's pool (0: the store's default, pool_size)")
	flag.BoolVar(&o.waitOnly, "wait-only", false, "run only the wait measurement, and write no report file")
	flag.Parse()
	if o.waiters > 32 {
		fmt.Fprintln(os.Stderr, "bench: -waiters: at most 32 duplicates of one key wait; the rest get the in-flight 409 at once")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// env is everything one benchmark run started.
type env struct {
	dir        string
	runID      string
	up         *upstream
	redis      *redisServer // nil without redis-server
	pg         *pgServer    // nil when no pg-* variant runs
	gw         *gatewayProc // the shared set's gateway
	pinned     *gatewayProc // the pinned set's gateway, during that set
	loader     loader
	wrkThreads int
	storeMsg   string
	pinMsg     string // why the pinned set did not run ("" when it did)
	// late are the executing runs' call limits, checked at the end;
	// primed the replay and conflict key sets' calls after priming.
	late   []callCheck
	primed map[string]int64
	// loadAvg is the machine's 1-minute load average at the start and
	// at the end of the run: other work competes for the same CPUs.
	loadAvg [2]string
	// pgStmts is what pg_stat_statements counted for each Postgres
	// variant, over its measured rounds.
	pgStmts map[string]*pgStatements
	// floor is what one synced append costs in the embedded store's
	// filesystem (its DIR is under dir).
	floor fsyncFloor
}

func (e *env) close() {
	for _, g := range []*gatewayProc{e.gw, e.pinned} {
		if g != nil {
			g.Stop()
		}
	}
	if e.redis != nil {
		e.redis.stop()
	}
	if e.pg != nil {
		e.pg.stop()
	}
	if e.up != nil {
		e.up.close()
	}
}

func run(o options) error {
	if o.rounds < 1 || o.duration <= 0 || o.conns < 1 || o.conns2 < 1 {
		return errors.New("rounds, duration, conns and conns2 must be positive")
	}
	if _, err := os.Stat(o.gateway); err != nil {
		return fmt.Errorf("gateway binary: %w (run make build)", err)
	}
	vs, err := selectVariants(o.variants, o.sets)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "idemgate-bench")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Println("temporary directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	e := &env{dir: dir, runID: randomID()}
	defer e.close()
	// Ctrl-C stops the children before exiting.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		e.close()
		os.Exit(130)
	}()

	began := time.Now()
	e.loadAvg[0] = loadAverage()
	if len(vs) > len(withoutStore(vs, "postgres")) {
		if e.pg, err = startPostgres(); err != nil {
			fmt.Printf("postgres: skipping the pg-* variants (%v)\n", err)
			vs = withoutStore(vs, "postgres")
		} else {
			fmt.Printf("postgres: %s on loopback (throw-away cluster, fsync on) for the pg-* variants\n", e.pg.version)
		}
	}
	if err := e.start(o); err != nil {
		return err
	}
	fmt.Println(e.storeMsg)
	fmt.Println("load generator:", e.loader.describe())
	if e.floor, err = measureFsyncFloor(e.dir, floorAppends); err != nil {
		return fmt.Errorf("fsync floor: %w", err)
	}
	fmt.Print(e.floor.line(e.dir))
	if err := e.prime(); err != nil {
		return err
	}
	var wait *waitResult
	if o.waiters > 0 && o.waitRounds > 0 {
		if wait, err = e.waitPath(o, siteRedis); err != nil {
			return err
		}
		fmt.Print(wait.text())
		if wait.bad > 0 {
			return fmt.Errorf("wait path: %d duplicates got another answer than the replay", wait.bad)
		}
	}
	if o.waitOnly {
		return nil
	}

	rounds := make(map[string][]roundStats, len(vs))
	if err := e.runSet(o, ofSet(vs, setShared), rounds); err != nil {
		return err
	}
	if pinned := ofSet(vs, setPinned); len(pinned) > 0 {
		if err := e.runPinned(o, pinned, rounds); err != nil {
			return err
		}
		if e.pinMsg != "" {
			fmt.Println("pinned set skipped:", e.pinMsg)
		}
	}
	if err := e.runSet(o, ofSet(vs, setTwo), rounds); err != nil {
		return err
	}

	// Plain and execute one request at a time: the latency the gateway
	// adds when requests do not queue for the CPU.
	idle := map[string][]roundStats{}
	plain, _ := findVariant("plain")
	execute, _ := findVariant("execute")
	if o.idleRounds > 0 {
		fmt.Printf("one connection: %d rounds of plain and execute\n", o.idleRounds)
		for r := range o.idleRounds {
			for _, v := range []variant{plain, execute} {
				idle[v.name] = append(idle[v.name], e.measure(v, 1, time.Second, fmt.Sprintf("i%d", r)))
			}
		}
	}
	// What one bare Redis round trip costs on this machine, for comparison.
	var ping roundTrips
	if e.redis != nil && o.idleRounds > 0 {
		ping = e.redis.roundTrips()
	}

	var mem *memoryResult
	if o.keys > 0 {
		if mem, err = e.memory(o, execute); err != nil {
			return err
		}
	}

	e.loadAvg[1] = loadAverage()
	rep := buildReport(o, e, vs, rounds, mem, time.Since(began), e.lateCalls())
	rep.idle, rep.ping, rep.wait = idle, ping, wait
	fmt.Print("\n" + rep.text())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(rep.markdown()), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", o.out)
	}
	if rep.failures != "" {
		return errors.New(rep.failures)
	}
	return nil
}

// runSet warms up and runs the rounds of one set of variants.
func (e *env) runSet(o options, vs []variant, rounds map[string][]roundStats) error {
	if len(vs) == 0 {
		return nil
	}
	set := vs[0].set
	conns := o.connsOf(set)
	if o.warmup > 0 {
		fmt.Printf("%s set: warm-up %v per variant, %d connections\n", set, o.warmup, conns)
		for _, v := range vs {
			e.load(v, conns, o.warmup, 0, "w")
		}
	}
	for r := range o.rounds {
		fmt.Printf("%s round %d/%d:", set, r+1, o.rounds)
		for i := range vs {
			v := vs[(i+r)%len(vs)]
			st := e.measure(v, conns, o.duration, fmt.Sprintf("r%d", r))
			rounds[v.name] = append(rounds[v.name], st)
			fmt.Printf(" %s %.0f/s", v.name, st.rps)
		}
		fmt.Println()
		if g := e.gatewayOf(vs[0]); !g.Running() {
			return fmt.Errorf("the gateway exited:\n%s", g.Tail(20))
		}
	}
	if o.profile != "" {
		return e.profiles(o, vs)
	}
	return nil
}

// connsOf returns the keep-alive connections of set's load.
func (o options) connsOf(set string) int {
	if set == setTwo {
		return o.conns2
	}
	return o.conns
}

// The pinned set's CPUs: the gateway on one, everything else on the other.
const (
	gatewayCPU = "0"
	othersCPU  = "1"
)

// runPinned runs the pinned set: a second gateway process started on
// gatewayCPU; this process (the upstream, and the Go load generator),
// Redis and wrk moved to othersCPU for the set's duration.
func (e *env) runPinned(o options, vs []variant, rounds map[string][]roundStats) error {
	switch {
	case runtime.NumCPU() < 2:
		e.pinMsg = "needs 2 CPUs"
		return nil
	case tasksetPath() == "":
		e.pinMsg = "taskset (util-linux) is not installed"
		return nil
	}
	pids := []int{os.Getpid()}
	if e.redis != nil {
		pids = append(pids, e.redis.pid())
	}
	saved := make([]string, len(pids))
	for i, pid := range pids {
		list, err := affinity(pid)
		if err != nil {
			return err
		}
		saved[i] = list
	}
	var err error
	if e.pinned, err = e.startGateway(o, "pinned", gatewayCPU, e.redisStore(o)); err != nil {
		return err
	}
	defer func() {
		e.pinned.Stop()
		e.pinned = nil
		for i, pid := range pids {
			if err := setAffinity(pid, saved[i]); err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
			}
		}
	}()
	for _, pid := range pids {
		if err := setAffinity(pid, othersCPU); err != nil {
			return err
		}
	}
	fmt.Printf("pinned set: the gateway on CPU %s; load generator, upstream and Redis on CPU %s\n", gatewayCPU, othersCPU)
	return e.runSet(o, vs, rounds)
}

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// start runs Redis (or not), the upstream and the gateway, and picks the
// load generator.
func (e *env) start(o options) error {
	var err error
	switch o.store {
	case "auto", "redis":
		e.redis, err = startRedis(e.dir)
		switch {
		case err == nil:
			e.storeMsg = "store: redis-server " + e.redis.info("server", "redis_version") + " on loopback" +
				"; the embedded store (store/embedded) for the embedded-* variants"
		case o.store == "redis":
			return fmt.Errorf("redis-server: %w", err)
		default:
			e.storeMsg = fmt.Sprintf("store: EMBEDDED for every variant (redis-server not available: %v). "+
				"The gateway figures are the embedded store's, not Redis's.", err)
		}
	case "embedded":
		e.storeMsg = "store: embedded (store/embedded) for every variant, as asked"
	default:
		return fmt.Errorf("-store %q: want auto, redis or embedded", o.store)
	}
	if e.loader, err = pickLoader(o.load, e.dir); err != nil {
		return err
	}
	e.wrkThreads = o.threads
	if e.up, err = startUpstream(); err != nil {
		return err
	}
	e.gw, err = e.startGateway(o, "idemgate", "", e.redisStore(o))
	return err
}

// redisStore is the store of the gateway's Redis site.
func (e *env) redisStore(o options) string {
	if e.redis == nil {
		return "embedded"
	}
	return "redis://" + e.redis.Addr + "/0"
}

func pickLoader(name, dir string) (loader, error) {
	switch name {
	case "auto", "wrk":
		bin, err := exec.LookPath("wrk")
		if err == nil {
			return &wrkLoader{bin: bin, dir: dir}, nil
		}
		if name == "wrk" {
			return nil, fmt.Errorf("wrk: %w", err)
		}
		return goLoader{}, nil
	case "go":
		return goLoader{}, nil
	}
	return nil, fmt.Errorf("-load %q: want auto, wrk or go", name)
}

// gatewayOf returns the gateway process a variant runs against.
func (e *env) gatewayOf(v variant) *gatewayProc {
	if v.set == setPinned && e.pinned != nil {
		return e.pinned
	}
	return e.gw
}

// prime completes the replay variants' records on both stores and holds
// the conflict variant's as outcome unknown (their upstream call fails
// with 500).
func (e *env) prime() error {
	client := &http.Client{Timeout: 10 * time.Second}
	// All of it within a minute, however the gateway answers.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := func(site, key string, fail bool) (int, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", "http://"+e.gw.sites[site]+"/v1/deals", strings.NewReader(requestBody))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", benchAuth)
		req.Header.Set("Idempotency-Key", key)
		if fail {
			req.Header.Set("X-Bench-Fail", "1")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	sites := []string{siteRedis, siteEmbedded}
	if e.pg != nil {
		sites = append(sites, sitePostgres)
	}
	for _, site := range sites {
		for i := range replayKeys {
			if st, err := send(site, fmt.Sprintf("r-%s-%d", e.runID, i), false); err != nil || st != 201 {
				return fmt.Errorf("priming replay key %d on the %s site: status %d, %v", i, site, st, err)
			}
		}
	}
	defer func() {
		e.primed = map[string]int64{}
		for _, set := range []string{"r-" + e.runID, "h-" + e.runID} {
			e.primed[set] = e.up.callsOf(set)
		}
	}()
	for i := range conflictKeys {
		key := fmt.Sprintf("h-%s-%d", e.runID, i)
		if st, err := send(siteRedis, key, true); err != nil || st != 500 {
			return fmt.Errorf("priming held key %d: status %d, %v", i, st, err)
		}
		// The record is now held: the same request answers 409.
		if st, err := send(siteRedis, key, false); err != nil || st != 409 {
			return fmt.Errorf("held key %d: status %d, %v (want 409)", i, st, err)
		}
	}
	return nil
}

// machine describes where the run happened.
func machine() string {
	model := cpuModel()
	if model == "" {
		model = "unknown CPU"
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH)
}
