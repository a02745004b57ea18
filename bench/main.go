// Command bench measures what the idempotency gateway costs compared to
// plain Caddy reverse_proxy, on one machine, in one run (`make bench`).
//
// It starts, all on 127.0.0.1:
//
//   - an upstream API: every POST answers 201 with a JSON body of about
//     300 bytes;
//   - a throw-away redis-server when one is installed, else the gateway uses
//     its embedded store (the output says which);
//   - ONE bin/idemgate process whose Caddyfile has three sites: plain
//     reverse_proxy, the gateway (idempotency + reverse_proxy) and a static
//     `respond` (the ceiling a replay could reach);
//
// and drives them with its own closed-loop HTTP/1.1 load generator
// (keep-alive connections, one request outstanding on each, like wrk).
// The variants are:
//
//	plain        POST /v1/deals through reverse_proxy only
//	execute      POST /v1/deals through the gateway, every request a new key
//	replay       the same with keys from a fixed set of completed records
//	conflict     the same with keys whose records are held as outcome unknown (409)
//	passthrough  POST /v1/notes through the gateway: no route matches
//	static       POST /v1/deals answered by Caddy's respond (the ceiling)
//
// Every round runs each variant for a fixed duration, in an order rotated
// from round to round (A B C, B C A, ...), so drift of the shared machine
// spreads over all variants. The report gives per variant the medians over
// the rounds of req/s, p50 and p99 latency, and Redis round trips per
// request (from INFO commandstats), then the ratios to plain and the p50
// the gateway adds on the execute path. Then it sends -keys distinct keys
// and reports the gateway's resident memory before and after. The same
// report is written to -out (bench/results.md).
//
// Usage (after `make build`):
//
//	go run ./bench -gateway bin/idemgate [-rounds 5] [-duration 3s] [-conns 64]
//
// Every phase is bounded in time; the whole run takes about 2-3 minutes.
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
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	gateway  string
	rounds   int
	duration time.Duration
	warmup   time.Duration
	conns    int
	keys     int
	keysMax  time.Duration
	out      string
	profile  string
	variants string
	store    string
	quiet    bool
	keep     bool
	// idleRounds of plain and execute on one connection, 1s each.
	idleRounds int
}

func main() {
	var o options
	flag.StringVar(&o.gateway, "gateway", "bin/idemgate", "the gateway binary (make build)")
	flag.IntVar(&o.rounds, "rounds", 7, "rounds; each runs every variant once")
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "load duration of one variant in one round")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load per variant before the first round")
	flag.IntVar(&o.conns, "conns", 64, "keep-alive connections")
	flag.IntVar(&o.idleRounds, "idle-rounds", 3, "rounds of plain and execute on one connection (1s each)")
	flag.IntVar(&o.keys, "keys", 100000, "distinct keys sent for the memory measurement (0: skip)")
	flag.DurationVar(&o.keysMax, "keys-max", 90*time.Second, "time limit of the memory measurement")
	flag.StringVar(&o.out, "out", "bench/results.md", "markdown report (\"\": none)")
	flag.StringVar(&o.profile, "profile", "", "directory for CPU profiles of the gateway, one per variant, taken after the rounds")
	flag.StringVar(&o.variants, "variants", "", "comma-separated variants to run (default all)")
	flag.StringVar(&o.store, "store", "auto", "auto (redis-server when installed), redis, or embedded")
	flag.BoolVar(&o.quiet, "quiet-logs", false, "run the gateway with log level WARN (no per-decision log line)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (configs and logs)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// env is everything one benchmark run started.
type env struct {
	dir      string
	runID    string
	up       *upstream
	redis    *redisServer // nil with the embedded store
	gw       *child
	admin    string // host:port of the gateway's admin endpoint
	plain    string // host:port of the plain reverse_proxy site
	gateway  string // host:port of the idempotency site
	static   string // host:port of the respond site
	storeMsg string
}

func (e *env) close() {
	if e.gw != nil {
		e.gw.stop()
	}
	if e.redis != nil {
		e.redis.stop()
	}
	if e.up != nil {
		e.up.close()
	}
}

func run(o options) error {
	if o.rounds < 1 || o.duration <= 0 || o.conns < 1 {
		return errors.New("rounds, duration and conns must be positive")
	}
	if _, err := os.Stat(o.gateway); err != nil {
		return fmt.Errorf("gateway binary: %w (run make build)", err)
	}
	vs, err := selectVariants(o.variants)
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
	if err := e.start(o); err != nil {
		return err
	}
	fmt.Println(e.storeMsg)
	if err := e.prime(); err != nil {
		return err
	}

	if o.warmup > 0 {
		fmt.Printf("warm-up: %v per variant\n", o.warmup)
		for _, v := range vs {
			e.load(v, o.conns, o.warmup, 0, "w")
		}
	}
	rounds := make(map[string][]roundStats, len(vs))
	for r := range o.rounds {
		fmt.Printf("round %d/%d:", r+1, o.rounds)
		for i := range vs {
			v := vs[(i+r)%len(vs)]
			st := e.measure(v, o.conns, o.duration, fmt.Sprintf("r%d", r))
			rounds[v.name] = append(rounds[v.name], st)
			fmt.Printf(" %s %.0f/s (%d up conns)", v.name, st.rps, st.upConns)
		}
		fmt.Println()
		if !e.gw.running() {
			return fmt.Errorf("the gateway exited:\n%s", e.gw.tail())
		}
	}

	// The same two paths one request at a time: the latency the gateway
	// adds when requests do not queue for the CPU.
	idle := map[string][]roundStats{}
	if o.idleRounds > 0 {
		fmt.Printf("one connection: %d rounds of plain and execute\n", o.idleRounds)
		for r := range o.idleRounds {
			for _, v := range []variant{allVariants[0], allVariants[1]} {
				idle[v.name] = append(idle[v.name], e.measure(v, 1, time.Second, fmt.Sprintf("i%d", r)))
			}
		}
	}
	// What one bare Redis round trip costs on this machine, for comparison.
	var ping time.Duration
	if e.redis != nil && o.idleRounds > 0 {
		ping = e.redis.roundTripP50(1000)
	}

	var mem *memoryResult
	if o.keys > 0 {
		if mem, err = e.memory(o); err != nil {
			return err
		}
	}
	if o.profile != "" {
		if err := e.profiles(o, vs); err != nil {
			return err
		}
	}

	rep := buildReport(o, e, vs, rounds, mem, time.Since(began))
	rep.idle, rep.ping = idle, ping
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

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// start runs Redis (or not), the upstream and the gateway.
func (e *env) start(o options) error {
	var err error
	storeArg := "embedded"
	_, _, mini := binaryVersions(o.gateway)
	switch o.store {
	case "auto", "redis":
		e.redis, err = startRedis(e.dir)
		switch {
		case err == nil:
			storeArg = "redis://" + e.redis.addr + "/0"
			e.storeMsg = "store: redis-server " + e.redis.info("server", "redis_version") + " on " + e.redis.addr
		case o.store == "redis":
			return fmt.Errorf("redis-server: %w", err)
		default:
			e.storeMsg = fmt.Sprintf("store: EMBEDDED (miniredis %s; redis-server not available: %v). "+
				"The embedded store manages only a few thousand operations a second: the gateway figures are the embedded store's, not Redis's.", mini, err)
		}
	case "embedded":
		e.storeMsg = "store: embedded (miniredis " + mini + "), as asked"
	default:
		return fmt.Errorf("-store %q: want auto, redis or embedded", o.store)
	}
	if e.up, err = startUpstream(); err != nil {
		return err
	}
	ports := make([]int, 4)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	e.admin = "127.0.0.1:" + strconv.Itoa(ports[0])
	e.plain = "127.0.0.1:" + strconv.Itoa(ports[1])
	e.gateway = "127.0.0.1:" + strconv.Itoa(ports[2])
	e.static = "127.0.0.1:" + strconv.Itoa(ports[3])
	logLevel := ""
	if o.quiet {
		logLevel = "log {\n\t\tlevel WARN\n\t}"
	}
	caddyfile := fmt.Sprintf(caddyfileTemplate, e.admin, logLevel,
		ports[1], e.up.addr,
		ports[2], storeArg, e.up.addr,
		ports[3], strconv.Quote(staticBody))
	if err := os.WriteFile(filepath.Join(e.dir, "Caddyfile"), []byte(caddyfile), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.dir, "routes.yaml"), []byte(routesYAML), 0o644); err != nil {
		return err
	}
	gw, err := filepath.Abs(o.gateway)
	if err != nil {
		return err
	}
	e.gw, err = startChild("idemgate", e.dir,
		[]string{"HOME=" + e.dir, "XDG_DATA_HOME=" + e.dir, "XDG_CONFIG_HOME=" + e.dir},
		gw, "run", "--config", "Caddyfile", "--adapter", "caddyfile")
	if err != nil {
		return err
	}
	return waitFor(e.gw, 30*time.Second, func() error {
		for _, url := range []string{"http://" + e.admin + "/config/", "http://" + e.plain + "/", "http://" + e.gateway + "/", "http://" + e.static + "/"} {
			if err := httpReady(url)(); err != nil {
				return err
			}
		}
		return nil
	})
}

// caddyfileTemplate: admin, log options; plain port, upstream; gateway
// port, store, upstream; static port, body.
const caddyfileTemplate = `{
	admin %s
	persist_config off
	auto_https off
	default_bind 127.0.0.1
	%s
}

:%d {
	reverse_proxy %s
}

:%d {
	idempotency {
		rules routes.yaml
		store %s
	}
	reverse_proxy %s
}

:%d {
	header Content-Type application/json
	respond %s 201
}
`

// routesYAML guards POST /v1/deals by its Idempotency-Key header (scope:
// the Authorization header, the default); /v1/notes matches no route.
const routesYAML = `routes:
  - name: create_deal
    match: { methods: [POST], path: /v1/deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
`

// staticBody is what the respond site answers: a deal like the upstream's.
const staticBody = `{"id":"D-1",` + dealPad + `D-1"},"status":"created"}`

// requestBody is the JSON every request sends (about 500 bytes).
const requestBody = `{"title":"Acme Corp annual renewal","amount":4200,"currency":"EUR",` +
	`"customer_id":"cus_9s6XKzkNRiz8i3","owner":"sales-emea-7","stage":"closed_won",` +
	`"items":[{"sku":"SKU-00017","qty":3,"price":1200.00,"note":"platform licence"},` +
	`{"sku":"SKU-00042","qty":1,"price":600.00,"note":"onboarding"}],` +
	`"meta":{"source":"crm-webhooks","delivery_attempt":1,"trace":"5b8aa5a2d2c872e8321cf37308d69df2"},` +
	`"notes":"renewal negotiated by the regional team; invoice quarterly; net 30; contact finance@acme.example"}`

// variant is one kind of load.
type variant struct {
	name         string
	addr         func(e *env) string
	path         string
	keys         string // "unique", "replay", "conflict"
	wantStatus   int
	wantReplayed bool
	gated        bool // goes through the idempotency handler's store
}

var allVariants = []variant{
	{name: "plain", addr: func(e *env) string { return e.plain }, path: "/v1/deals", keys: "unique", wantStatus: 201},
	{name: "execute", addr: func(e *env) string { return e.gateway }, path: "/v1/deals", keys: "unique", wantStatus: 201, gated: true},
	{name: "replay", addr: func(e *env) string { return e.gateway }, path: "/v1/deals", keys: "replay", wantStatus: 201, wantReplayed: true, gated: true},
	{name: "conflict", addr: func(e *env) string { return e.gateway }, path: "/v1/deals", keys: "conflict", wantStatus: 409, gated: true},
	{name: "passthrough", addr: func(e *env) string { return e.gateway }, path: "/v1/notes", keys: "unique", wantStatus: 201},
	{name: "static", addr: func(e *env) string { return e.static }, path: "/v1/deals", keys: "unique", wantStatus: 201},
}

func selectVariants(list string) ([]variant, error) {
	if list == "" {
		return allVariants, nil
	}
	var vs []variant
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, v := range allVariants {
			if v.name == strings.TrimSpace(name) {
				vs, found = append(vs, v), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown variant %q", name)
		}
	}
	return vs, nil
}

const (
	replayKeys   = 256 // completed records the replay variant cycles through
	conflictKeys = 64  // records held as outcome unknown
)

// requestFor returns the raw request maker of a variant. tag makes the
// unique keys of one run differ from every other run's.
func (e *env) requestFor(v variant, addr, tag string) requestFunc {
	head := "POST " + v.path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: idemgate-bench\r\n" +
		"Content-Type: application/json\r\nAuthorization: Bearer sk_bench_4f1c9a\r\n" +
		"Content-Length: " + strconv.Itoa(len(requestBody)) + "\r\nIdempotency-Key: "
	tail := "\r\n\r\n" + requestBody
	prefix := e.runID + "-" + tag + "-"
	return func(dst []byte, conn, seq int) []byte {
		dst = append(dst, head...)
		switch v.keys {
		case "replay":
			dst = append(dst, "r-"+e.runID+"-"...)
			dst = strconv.AppendInt(dst, int64((conn*31+seq)%replayKeys), 10)
		case "conflict":
			dst = append(dst, "h-"+e.runID+"-"...)
			dst = strconv.AppendInt(dst, int64((conn*31+seq)%conflictKeys), 10)
		default:
			dst = append(dst, prefix...)
			dst = strconv.AppendInt(dst, int64(conn), 10)
			dst = append(dst, '-')
			dst = strconv.AppendInt(dst, int64(seq), 10)
		}
		return append(dst, tail...)
	}
}

// prime completes the replay variant's records and holds the conflict
// variant's as outcome unknown (their upstream call fails with 500).
func (e *env) prime() error {
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(key string, fail bool) (int, error) {
		req, err := http.NewRequest("POST", "http://"+e.gateway+"/v1/deals", strings.NewReader(requestBody))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk_bench_4f1c9a")
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
	for i := range replayKeys {
		if st, err := send("r-"+e.runID+"-"+strconv.Itoa(i), false); err != nil || st != 201 {
			return fmt.Errorf("priming replay key %d: status %d, %v", i, st, err)
		}
	}
	for i := range conflictKeys {
		if st, err := send("h-"+e.runID+"-"+strconv.Itoa(i), true); err != nil || st != 500 {
			return fmt.Errorf("priming held key %d: status %d, %v", i, st, err)
		}
		// The record is now held: the same request answers 409.
		if st, err := send("h-"+e.runID+"-"+strconv.Itoa(i), false); err != nil || st != 409 {
			return fmt.Errorf("held key %d: status %d, %v (want 409)", i, st, err)
		}
	}
	return nil
}

// load runs one variant without measuring Redis.
func (e *env) load(v variant, conns int, d time.Duration, limit int, tag string) *loadResult {
	addr := v.addr(e)
	return runLoad(loadSpec{addr: addr, conns: conns, duration: d, limit: limit, request: e.requestFor(v, addr, v.name+tag)})
}

// measure runs one variant for d and summarizes it, with the Redis
// round trips it caused and the CPU time each process spent on it.
func (e *env) measure(v variant, conns int, d time.Duration, tag string) roundStats {
	var before *scriptStats
	if e.redis != nil {
		if st, err := e.redis.scriptStats(); err == nil {
			before = &st
		}
	}
	cpu0, conns0 := e.cpu(), e.up.conns.Load()
	res := e.load(v, conns, d, 0, tag)
	cpu1, conns1 := e.cpu(), e.up.conns.Load()
	var scripts *scriptStats
	if before != nil {
		if st, err := e.redis.scriptStats(); err == nil {
			scripts = &scriptStats{calls: st.calls - before.calls, usec: st.usec - before.usec}
		}
	}
	if res.firstErr != nil {
		fmt.Printf(" [%s: %d errors, first: %v]", v.name, res.errors, res.firstErr)
	}
	st := summarize(res, badAnswers(v, res), scripts)
	st.upConns = int(conns1 - conns0)
	if res.requests > 0 {
		for i := range st.cpu {
			if cpu0[i] >= 0 && cpu1[i] >= 0 {
				st.cpu[i] = (cpu1[i] - cpu0[i]) / time.Duration(res.requests)
			}
		}
	}
	return st
}

// cpu returns the CPU time used so far by the gateway, Redis (-1 with the
// embedded store) and this process (load generator and upstream).
func (e *env) cpu() (t [numProcs]time.Duration) {
	t[procGateway], t[procRedis] = -1, -1
	if d, err := cpuTime(e.gw.pid()); err == nil {
		t[procGateway] = d
	}
	if e.redis != nil {
		if d, err := cpuTime(e.redis.pid()); err == nil {
			t[procRedis] = d
		}
	}
	t[procBench] = selfCPU()
	return t
}

// badAnswers counts answers that are not what the variant expects.
func badAnswers(v variant, r *loadResult) int {
	bad := r.requests - r.statuses[v.wantStatus]
	if v.wantReplayed {
		bad += r.requests - r.replayed
	} else {
		bad += r.replayed
	}
	return bad
}

// memoryResult is the gateway's resident memory around many distinct keys.
type memoryResult struct {
	keys                  int
	seconds               float64
	before, after, peakKB int64
	bad                   int
}

func (e *env) memory(o options) (*memoryResult, error) {
	before, _, err := rss(e.gw.pid())
	if err != nil {
		return nil, err
	}
	fmt.Printf("memory: sending %d distinct keys (at most %v)...\n", o.keys, o.keysMax)
	v := allVariants[1] // execute
	res := e.load(v, o.conns, o.keysMax, o.keys, "m")
	after, peak, err := rss(e.gw.pid())
	if err != nil {
		return nil, err
	}
	return &memoryResult{keys: res.requests, seconds: res.elapsed.Seconds(), before: before, after: after, peakKB: peak, bad: badAnswers(v, res) + res.errors}, nil
}

// profiles takes a CPU profile of the gateway under each variant's load,
// after the measured rounds (profiling slows the gateway a little).
func (e *env) profiles(o options, vs []variant) error {
	if err := os.MkdirAll(o.profile, 0o755); err != nil {
		return err
	}
	secs := max(1, int(o.duration.Seconds()))
	for _, v := range vs {
		path := filepath.Join(o.profile, v.name+".pprof")
		done := make(chan error, 1)
		go func() {
			done <- fetch("http://"+e.admin+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), path, time.Duration(secs+30)*time.Second)
		}()
		time.Sleep(100 * time.Millisecond) // let the profile start first
		e.load(v, o.conns, time.Duration(secs)*time.Second+time.Second, 0, "p")
		if err := <-done; err != nil {
			return fmt.Errorf("profile of %s: %w", v.name, err)
		}
		fmt.Println("profile:", path)
	}
	return nil
}

func fetch(url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// machine describes where the run happened.
func machine() string {
	model := cpuModel()
	if model == "" {
		model = "unknown CPU"
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH)
}
