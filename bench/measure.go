package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// spec is the load of one run of v; tag makes its unique keys its own.
func (e *env) spec(v variant, conns int, d time.Duration, limit int, tag string) loadSpec {
	addr := e.gatewayOf(v).sites[v.site]
	spec := loadSpec{addr: addr, conns: conns, threads: e.threads(v), duration: d, limit: limit, req: e.requestSpec(v, addr, v.name+tag)}
	if v.set == setPinned && e.pinned != nil {
		spec.cpus = othersCPU
	}
	return spec
}

// run drives one load run. A limit (an exact number of requests) needs
// the Go generator.
func (e *env) run(spec loadSpec) *loadResult {
	if spec.limit > 0 {
		return goLoader{}.run(spec)
	}
	return e.loader.run(spec)
}

// load runs one variant without measuring it.
func (e *env) load(v variant, conns int, d time.Duration, limit int, tag string) *loadResult {
	return e.run(e.spec(v, conns, d, limit, tag))
}

// threads is the number of wrk threads for v: one on the pinned set's
// single CPU.
func (e *env) threads(v variant) int {
	if v.set == setPinned {
		return 1
	}
	return max(1, e.wrkThreads)
}

// measure runs one variant for d and summarizes it, with the Redis
// commands it caused, the upstream calls it made and the CPU time each
// process spent on it.
func (e *env) measure(v variant, conns int, d time.Duration, tag string) roundStats {
	g := e.gatewayOf(v)
	var before *commandStats
	if e.redis != nil {
		if st, err := e.redis.commandStats(); err == nil {
			before = &st
		}
	}
	var pg0 pgWork
	if v.store == "postgres" {
		pg0 = e.pg.work()
	}
	spec := e.spec(v, conns, d, 0, tag)
	set := spec.req.set()
	cpu0, calls0, conns0 := e.cpu(g), e.up.callsOf(set), e.up.conns.Load()
	res := e.run(spec)
	e.settle()
	cpu1, calls1, conns1 := e.cpu(g), e.up.callsOf(set), e.up.conns.Load()
	var redisWork *commandStats
	if before != nil && v.store != "embedded" {
		if st, err := e.redis.commandStats(); err == nil {
			delta := st.sub(*before)
			redisWork = &delta
		}
	}
	if res.firstErr != nil {
		fmt.Printf(" [%s: %d errors, first: %v]", v.name, res.errors, res.firstErr)
	}
	bad := badAnswers(v, res) + wrongCalls(v, res, int(calls1-calls0), conns)
	if v.executes {
		// Calls that reach the upstream later still count: checked at the end.
		e.late = append(e.late, callCheck{variant: v.name, set: set, most: int64(res.requests + conns + res.errors)})
	}
	st := summarize(res, bad, redisWork)
	st.upConns = int(conns1 - conns0)
	if res.requests > 0 {
		if res.genCPU >= 0 {
			cpu0[procGen], cpu1[procGen] = 0, res.genCPU
			if cpu1[procBench] >= 0 {
				cpu1[procBench] += res.genCPU
			}
		}
		for i := range st.cpu {
			if cpu0[i] >= 0 && cpu1[i] >= 0 && (i != procRedis || v.store != "embedded") {
				st.cpu[i] = (cpu1[i] - cpu0[i]) / time.Duration(res.requests)
			}
		}
	}
	if v.store == "postgres" {
		pg1 := e.pg.work()
		applyPostgres(&st, pg0, pg1, res.requests)
		if e.pgStmts == nil {
			e.pgStmts = map[string]*pgStatements{}
		}
		ps := e.pgStmts[v.name]
		if ps == nil {
			ps = &pgStatements{byID: map[int64]stmtStat{}}
			e.pgStmts[v.name] = ps
		}
		ps.requests += res.requests
		stmtDelta(ps.byID, pg0, pg1)
	}
	return st
}

// settle waits until the upstream's call count stops moving (requests
// the load generator left in flight at its end still reach it), for at
// most 2s, so that their CPU time counts in the round that sent them.
func (e *env) settle() {
	deadline := time.Now().Add(2 * time.Second)
	last := e.up.calls.Load()
	for time.Now().Before(deadline) {
		time.Sleep(30 * time.Millisecond)
		n := e.up.calls.Load()
		if n == last {
			return
		}
		last = n
	}
}

// cpu returns the CPU time used so far by the gateway g, Redis (-1
// without redis-server) and this process (upstream, and the Go load
// generator).
func (e *env) cpu(g *gatewayProc) (t [numProcs]time.Duration) {
	t[procGateway], t[procRedis], t[procGen] = -1, -1, -1
	if d, err := cpuTime(g.Pid()); err == nil {
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

// badAnswers counts answers that are not what the variant expects. Of
// wrk's answers only the count with a status of 400 or more is known.
func badAnswers(v variant, r *loadResult) int {
	if r.coarse {
		if v.wantStatus >= 400 {
			return r.requests - r.over399
		}
		return r.over399
	}
	bad := r.requests - r.statuses[v.wantStatus]
	if v.wantReplayed {
		bad += r.requests - r.replayed
	} else {
		bad += r.replayed
	}
	return bad
}

// wrongCalls checks the upstream's calls against the answers: a variant
// that executes makes one call per answer (plus at most one per
// connection for the requests in flight when the run ended, and one per
// failed request), the others none at all.
func wrongCalls(v variant, r *loadResult, calls, conns int) int {
	if !v.executes {
		return calls
	}
	if calls < r.requests {
		return r.requests - calls
	}
	if most := r.requests + conns + r.errors; calls > most {
		return calls - most
	}
	return 0
}

// callCheck is a load run's most upstream calls, checked again at the end
// of the whole run.
type callCheck struct {
	variant, set string
	most         int64
}

// lateCalls checks, after every phase, that no run's keys reached the
// upstream more often than its requests allowed, and that no replay or
// conflict key reached it after priming. It returns what failed.
func (e *env) lateCalls() []string {
	e.settle()
	var fails []string
	for _, c := range e.late {
		if n := e.up.callsOf(c.set); n > c.most {
			fails = append(fails, fmt.Sprintf("%s: %d upstream calls for at most %d requests", c.variant, n, c.most))
		}
	}
	for set, n := range e.primed {
		if now := e.up.callsOf(set); now != n {
			fails = append(fails, fmt.Sprintf("keys %s-*: %d upstream calls after priming", set, now-n))
		}
	}
	return fails
}

// memoryResult is the gateway's resident memory around many distinct keys.
type memoryResult struct {
	keys                   int
	seconds                float64
	before, after, peakKB  int64
	badAnswers, wrongCalls int
	statuses               map[int]int
	errors                 int
	firstErr               error
}

// failure says what went wrong in the memory phase, "" when nothing did.
func (m *memoryResult) failure() string {
	if m.badAnswers == 0 && m.wrongCalls == 0 && m.errors == 0 {
		return ""
	}
	return fmt.Sprintf("memory phase: %d unexpected answers (statuses %v), %d wrong upstream calls, %d errors (first: %v) of %d requests",
		m.badAnswers, m.statuses, m.wrongCalls, m.errors, m.firstErr, m.keys)
}

// memory sends o.keys requests with distinct keys through v (the Go
// generator: it stops at an exact count) and reads the gateway's RSS
// before and after.
func (e *env) memory(o options, v variant) (*memoryResult, error) {
	before, _, err := rss(e.gw.Pid())
	if err != nil {
		return nil, err
	}
	fmt.Printf("memory: sending %d distinct keys (at most %v)...\n", o.keys, o.keysMax)
	spec := e.spec(v, o.conns, o.keysMax, o.keys, "m")
	res := e.run(spec)
	e.settle()
	after, peak, err := rss(e.gw.Pid())
	if err != nil {
		return nil, err
	}
	m := &memoryResult{keys: res.requests, seconds: res.elapsed.Seconds(), before: before, after: after, peakKB: peak,
		badAnswers: badAnswers(v, res), statuses: res.statuses, errors: res.errors, firstErr: res.firstErr,
		wrongCalls: wrongCalls(v, res, int(e.up.callsOf(spec.req.set())), o.conns)}
	return m, nil
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
		admin := e.gatewayOf(v).admin
		go func() {
			done <- fetch("http://"+admin+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), path, time.Duration(secs+30)*time.Second)
		}()
		time.Sleep(100 * time.Millisecond) // let the profile start first
		e.load(v, o.connsOf(v.set), time.Duration(secs+1)*time.Second, 0, "p")
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
