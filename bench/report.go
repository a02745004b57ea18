package main

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"time"
)

// ratioLine is one "ratio NUM/DEN x" line of the report; min > 0 makes it
// a target (reported, never asserted).
type ratioLine struct {
	num, den string
	min      float64
}

var ratioLines = []ratioLine{
	{"execute", "plain", 0.80},
	{"replay", "static", 0.60},
	{"passthrough", "plain", 0.98},
	{"embedded-execute", "execute", 1.0},
	{"embedded-execute", "plain", 0.80},
	{"embedded-replay", "replay", 1.0},
	{"pg-execute", "plain", 0.45},
	{"pg-replay", "static", 0.35},
	{"pg-execute", "execute", 0},
	{"pg-replay", "replay", 0},
	{"pinned-execute", "pinned-plain", 0},
	{"pinned-replay", "pinned-static", 0},
	{"pinned-passthrough", "pinned-plain", 0},
}

// perRequestTarget is a goal for a per-request figure of one variant.
type perRequestTarget struct {
	what    string // "Redis commands per execute"
	variant string
	get     func(s variantSummary) float64 // -1: not measured
	max     float64
	unit    string
}

var perRequestTargets = []perRequestTarget{
	{"Redis commands per execute", "execute", func(s variantSummary) float64 { return s.cmdsPR }, 6, ""},
	{"Redis commands per replay", "replay", func(s variantSummary) float64 { return s.cmdsPR }, 3, ""},
	{"Redis CPU per execute", "execute", func(s variantSummary) float64 { return s.cpu[procRedis] }, 25, " µs"},
	{"Redis CPU per replay", "replay", func(s variantSummary) float64 { return s.cpu[procRedis] }, 12, " µs"},
	{"Postgres CPU per execute", "pg-execute", func(s variantSummary) float64 { return s.cpu[procRedis] }, 250, " µs"},
	{"Postgres CPU per replay", "pg-replay", func(s variantSummary) float64 { return s.cpu[procRedis] }, 120, " µs"},
	{"Postgres WAL per replay", "pg-replay", func(s variantSummary) float64 { return s.walPR }, 0, " bytes"},
}

// Gateway CPU goals: per execute at most plain + maxGatewayExecuteAdded,
// per replay at most maxGatewayReplay.
const (
	maxGatewayExecuteAdded = 30 // µs
	maxGatewayReplay       = 50 // µs
)

// Goals of a lone request (the two set): what a guarded execute on Redis
// may add over plain reverse_proxy, in p50 latency and in CPU per request
// of the gateway and Redis together.
const (
	maxTwoExecuteAddedP50 = 0.30 // ms
	maxTwoExecuteAddedCPU = 250  // µs
	// The embedded store's execute: one fsync (about 0.2 ms on an SSD)
	// and little CPU beyond it, and no more latency than Redis adds.
	maxTwoEmbeddedAddedP50 = 0.40 // ms
	maxTwoEmbeddedAddedCPU = 300  // µs
)

// maxTwoPostgresAddedP50 is what a guarded execute on Postgres may add
// over plain reverse_proxy in p50 latency at the two set's connections.
const maxTwoPostgresAddedP50 = 1.0 // ms

type report struct {
	o        options
	e        *env
	vs       []variant // those that ran
	sum      map[string]variantSummary
	rounds   map[string][]roundStats
	mem      *memoryResult
	idle     map[string][]roundStats // plain and execute on one connection
	ping     roundTrips              // p50s of bare EVALSHA round trips from the load generator (zero: none)
	wait     *waitResult             // duplicates waiting for one slow call (nil: not measured)
	took     time.Duration
	failures string // non-empty when answers were wrong: the run is invalid
}

// buildReport summarizes the rounds; fails are failures found elsewhere
// (late upstream calls).
func buildReport(o options, e *env, vs []variant, rounds map[string][]roundStats, mem *memoryResult, took time.Duration, fails []string) *report {
	r := &report{o: o, e: e, rounds: rounds, mem: mem, took: took, sum: map[string]variantSummary{}}
	for _, v := range vs {
		if len(rounds[v.name]) == 0 {
			continue
		}
		r.vs = append(r.vs, v)
		s := summarizeRounds(rounds[v.name])
		r.sum[v.name] = s
		// A few errors at the very end of a round (a connection cut while
		// the next round starts) are tolerated; wrong answers are not.
		if s.bad > 0 || s.errors*1000 > s.requests {
			fails = append(fails, fmt.Sprintf("%s: %d unexpected answers or upstream calls, %d errors of %d requests", v.name, s.bad, s.errors, s.requests))
		}
	}
	if mem != nil && mem.failure() != "" {
		fails = append(fails, mem.failure())
	}
	r.failures = strings.Join(fails, "; ")
	return r
}

// ratio returns num's median req/s over den's, and whether both ran.
func (r *report) ratio(num, den string) (float64, bool) {
	d, okd := r.sum[den]
	n, okn := r.sum[num]
	if !okd || !okn || d.rps == 0 {
		return 0, false
	}
	return n.rps / d.rps, true
}

// roundRatios returns the per-round ratio range (min, max) of num to den
// (variants of one set run in the same rounds).
func (r *report) roundRatios(num, den string) (lo, hi float64, ok bool) {
	dr, nr := r.rounds[den], r.rounds[num]
	for i := range min(len(dr), len(nr)) {
		if dr[i].rps == 0 {
			continue
		}
		x := nr[i].rps / dr[i].rps
		if !ok || x < lo {
			lo = x
		}
		if !ok || x > hi {
			hi = x
		}
		ok = true
	}
	return lo, hi, ok
}

func (r *report) addedP50() (float64, bool) {
	p, okp := r.sum["plain"]
	x, okx := r.sum["execute"]
	return x.p50 - p.p50, okp && okx
}

// gatewayCPU returns the gateway's CPU per execute minus plain's and per
// replay, from the pinned set when it ran (the gateway alone on its CPU),
// else from the shared set.
func (r *report) gatewayCPU() (added, replay float64, set string, ok bool) {
	for _, pre := range []string{"pinned-", ""} {
		p, okp := r.sum[pre+"plain"]
		x, okx := r.sum[pre+"execute"]
		y, oky := r.sum[pre+"replay"]
		if okp && okx && oky && p.cpu[procGateway] >= 0 && x.cpu[procGateway] >= 0 && y.cpu[procGateway] >= 0 {
			set = setShared
			if pre != "" {
				set = setPinned
			}
			return x.cpu[procGateway] - p.cpu[procGateway], y.cpu[procGateway], set, true
		}
	}
	return 0, 0, "", false
}

// idleLine reports the latency the gateway adds with one connection.
func (r *report) idleLine() string {
	p, x := r.idle["plain"], r.idle["execute"]
	if len(p) == 0 || len(x) == 0 {
		return ""
	}
	ps, xs := summarizeRounds(p), summarizeRounds(x)
	ping := ""
	if rt := r.ping; rt.hot > 0 {
		ping = fmt.Sprintf("; one bare EVALSHA round trip to Redis: %.3f ms back to back, %.3f ms after 1 ms idle (GOMAXPROCS %d), %.3f ms after 1 ms idle (GOMAXPROCS 1)",
			ms(rt.hot), ms(rt.idle), rt.procs, ms(rt.idleOne))
	}
	return fmt.Sprintf("one connection: plain p50 %.3f ms (%.0f req/s), execute p50 %.3f ms (%.0f req/s): the gateway adds %.3f ms%s\n",
		ps.p50, ps.rps, xs.p50, xs.rps, xs.p50-ps.p50, ping)
}

func (r *report) table(md bool) string {
	var b strings.Builder
	row := func(cells ...string) {
		if md {
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
			return
		}
		fmt.Fprintf(&b, "%-18s %8s %7s %7s %6s %8s %11s %6s %8s %7s %7s  %s\n",
			cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6], cells[7], cells[8], cells[9], cells[10], cells[11])
	}
	row("variant", "req/s", "p50 ms", "p99 ms", "×plain", "cmds/req", "scripts/req", "gw µs", "store µs", "load µs", "+CPU µs", "answers")
	if md {
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	}
	for _, v := range r.vs {
		if v.set == setTwo {
			continue // twoTable
		}
		s := r.sum[v.name]
		x := "-"
		if p := r.sum[plainOf(v.set)].rps; p > 0 {
			x = fmt.Sprintf("%.2f", s.rps/p)
		}
		perReq := func(f float64) string {
			if f < 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", f)
		}
		ans := fmt.Sprintf("%d", v.wantStatus)
		if v.wantReplayed {
			ans += " replayed"
		}
		if s.bad > 0 || s.errors > 0 {
			ans += fmt.Sprintf(" (%d wrong, %d errors)", s.bad, s.errors)
		}
		cpu := func(i int) string {
			if s.cpu[i] < 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f", s.cpu[i])
		}
		row(v.name, fmt.Sprintf("%.0f", s.rps), fmt.Sprintf("%.2f", s.p50), fmt.Sprintf("%.2f", s.p99), x,
			perReq(s.cmdsPR), perReq(s.scriptPR), cpu(procGateway), cpu(procRedis), cpu(procBench), r.addedCPUCell(v.name), ans)
	}
	return b.String()
}

// addedOverPlain returns what variant name adds over the plain variant of
// its set: p50 in ms and gateway CPU per request in µs (cpuOK false when
// either CPU figure is missing).
func (r *report) addedOverPlain(name string) (p50, cpu float64, cpuOK, ok bool) {
	v, okv := findVariant(name)
	s, oks := r.sum[name]
	p, okp := r.sum[plainOf(v.set)]
	if !okv || !oks || !okp {
		return 0, 0, false, false
	}
	cpuOK = s.cpu[procGateway] >= 0 && p.cpu[procGateway] >= 0
	if cpuOK {
		cpu = s.cpu[procGateway] - p.cpu[procGateway]
	}
	return s.p50 - p.p50, cpu, cpuOK, true
}

// addedCPU returns the CPU per request that variant name adds over the
// plain variant of its set, gateway and Redis together (a variant without
// Redis, or a plain one, counts Redis as 0): what one request costs the
// machine beyond plain reverse_proxy. ok is false when a gateway figure
// is missing or name is a plain variant.
func (r *report) addedCPU(name string) (float64, bool) {
	v, okv := findVariant(name)
	s, oks := r.sum[name]
	p, okp := r.sum[plainOf(v.set)]
	if !okv || !oks || !okp || name == plainOf(v.set) || s.cpu[procGateway] < 0 || p.cpu[procGateway] < 0 {
		return 0, false
	}
	both := func(s variantSummary) float64 { return s.cpu[procGateway] + max(s.cpu[procRedis], 0) }
	return both(s) - both(p), true
}

// twoTable is the table of the two set (few connections): per variant
// the latency and the gateway's CPU, and for the variants on a store
// what they add over plain.
func (r *report) twoTable(md bool) string {
	var b strings.Builder
	row := func(cells ...string) {
		if md {
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
			return
		}
		fmt.Fprintf(&b, "%-22s %8s %7s %7s %7s %8s %9s %8s %8s  %s\n", cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6], cells[7], cells[8], cells[9])
	}
	n := 0
	for _, v := range r.vs {
		if v.set != setTwo {
			continue
		}
		if n == 0 {
			row("variant", "req/s", "p50 ms", "p99 ms", "gw µs", "store µs", "+p50 ms", "+gw µs", "+CPU µs", "answers")
			if md {
				b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
			}
		}
		n++
		s := r.sum[v.name]
		gw, rd, addP50, addCPU := "-", "-", "-", "-"
		if s.cpu[procGateway] >= 0 {
			gw = fmt.Sprintf("%.0f", s.cpu[procGateway])
		}
		if s.cpu[procRedis] >= 0 {
			rd = fmt.Sprintf("%.0f", s.cpu[procRedis])
		}
		if v.executes && v.store != "" {
			if dp, dc, cok, ok := r.addedOverPlain(v.name); ok {
				addP50 = fmt.Sprintf("%+.3f", dp)
				if cok {
					addCPU = fmt.Sprintf("%+.0f", dc)
				}
			}
		}
		ans := fmt.Sprintf("%d", v.wantStatus)
		if v.wantReplayed {
			ans += " replayed"
		}
		if s.bad > 0 || s.errors > 0 {
			ans += fmt.Sprintf(" (%d wrong, %d errors)", s.bad, s.errors)
		}
		row(v.name, fmt.Sprintf("%.0f", s.rps), fmt.Sprintf("%.3f", s.p50), fmt.Sprintf("%.3f", s.p99), gw, rd, addP50, addCPU, r.addedCPUCell(v.name), ans)
	}
	return b.String()
}

// addedCPUCell is the +CPU µs cell of variant name ("-" when there is
// none).
func (r *report) addedCPUCell(name string) string {
	if c, ok := r.addedCPU(name); ok {
		return fmt.Sprintf("%+.0f", c)
	}
	return "-"
}

// sideBySide compares the embedded store with Redis, execute and replay,
// in every set where both ran: "embedded-execute vs execute (64
// connections): ...".
func (r *report) sideBySide() string {
	var b strings.Builder
	cpu := func(s variantSummary) string {
		if s.cpu[procGateway] < 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", s.cpu[procGateway])
	}
	for _, engine := range []string{"embedded-", "pg-"} {
		for _, set := range []string{setShared, setTwo} {
			pre := prefixOf(set)
			for _, kind := range []string{"execute", "replay"} {
				em, okE := r.sum[pre+engine+kind]
				rd, okR := r.sum[pre+kind]
				if !okE || !okR {
					continue
				}
				x := "-"
				if rd.rps > 0 {
					x = fmt.Sprintf("%.2f", em.rps/rd.rps)
				}
				fmt.Fprintf(&b, "%s%s vs %s (%d connections): req/s %.0f vs %.0f (%sx), p50 %.3f vs %.3f ms (%+.3f), p99 %.3f vs %.3f ms, gateway µs/req %s vs %s\n",
					engine, kind, kind, r.o.connsOf(set), em.rps, rd.rps, x, em.p50, rd.p50, em.p50-rd.p50, em.p99, rd.p99, cpu(em), cpu(rd))
			}
		}
	}
	return b.String()
}

// postgresLines give, per Postgres variant that ran, the cluster's CPU
// and WAL per request and what pg_stat_statements counted.
func (r *report) postgresLines() string {
	var b strings.Builder
	for _, v := range r.vs {
		if v.store != "postgres" {
			continue
		}
		s, ok := r.sum[v.name]
		if !ok {
			continue
		}
		cpu, wal := "-", "-"
		if s.cpu[procRedis] >= 0 {
			cpu = fmt.Sprintf("%.0f µs", s.cpu[procRedis])
		}
		if s.walPR >= 0 {
			wal = fmt.Sprintf("%.0f bytes", s.walPR)
		}
		fmt.Fprintf(&b, "postgres %s: CPU %s per request, WAL %s per request\n", v.name, cpu, wal)
		if r.e != nil {
			b.WriteString(r.e.pgStmts[v.name].text(v.name))
		}
	}
	return b.String()
}

// ratios are the lines scripts grep for: "ratio execute/plain 0.91".
func (r *report) ratios() string {
	var b strings.Builder
	for _, t := range ratioLines {
		if x, ok := r.ratio(t.num, t.den); ok {
			fmt.Fprintf(&b, "ratio %s/%s %.2f\n", t.num, t.den, x)
		}
	}
	if d, ok := r.addedP50(); ok {
		fmt.Fprintf(&b, "added p50 execute-plain %.2f ms\n", d)
	}
	if added, replay, set, ok := r.gatewayCPU(); ok {
		fmt.Fprintf(&b, "gateway CPU (%s set) execute-plain %+.0f µs, replay %.0f µs\n", set, added, replay)
	}
	return b.String()
}

func (r *report) goals() string {
	var b strings.Builder
	for _, t := range ratioLines {
		x, ok := r.ratio(t.num, t.den)
		if !ok || t.min == 0 {
			continue
		}
		lo, hi, _ := r.roundRatios(t.num, t.den)
		fmt.Fprintf(&b, "- %s/%s: %.2f (rounds %.2f–%.2f), target ≥ %.2f: %s\n", t.num, t.den, x, lo, hi, t.min, met(x >= t.min))
	}
	for _, t := range perRequestTargets {
		s, ok := r.sum[t.variant]
		if !ok || t.get(s) < 0 {
			continue
		}
		// Judged as shown: the commands of the requests still in flight
		// when a round ends put the counts a hair above the exact figure.
		v := math.Round(t.get(s)*10) / 10
		fmt.Fprintf(&b, "- %s: %.1f%s, target ≤ %.0f%s: %s\n", t.what, v, t.unit, t.max, t.unit, met(v <= t.max))
	}
	if dp, _, _, ok := r.addedOverPlain("two-execute"); ok {
		fmt.Fprintf(&b, "- added p50 per execute (%d connections): %+.3f ms, target ≤ %.2f ms: %s\n", r.o.conns2, dp, maxTwoExecuteAddedP50, met(dp <= maxTwoExecuteAddedP50))
	}
	if dp, _, _, ok := r.addedOverPlain("two-pg-execute"); ok {
		fmt.Fprintf(&b, "- added p50 per execute on Postgres (%d connections): %+.3f ms, target ≤ %.2f ms: %s\n", r.o.conns2, dp, maxTwoPostgresAddedP50, met(dp <= maxTwoPostgresAddedP50))
	}
	if dc, ok := r.addedCPU("two-execute"); ok {
		fmt.Fprintf(&b, "- added CPU per execute, gateway and Redis (%d connections): %+.0f µs, target ≤ %d µs: %s\n", r.o.conns2, dc, maxTwoExecuteAddedCPU, met(dc <= maxTwoExecuteAddedCPU))
	}
	if dp, _, _, ok := r.addedOverPlain("two-embedded-execute"); ok {
		limit := maxTwoEmbeddedAddedP50
		what := fmt.Sprintf("%.2f ms", limit)
		if rp, _, _, ok := r.addedOverPlain("two-execute"); ok && rp < limit {
			limit, what = rp, fmt.Sprintf("%.3f ms (Redis execute's)", rp)
		}
		fmt.Fprintf(&b, "- added p50 per embedded execute (%d connections): %+.3f ms, target ≤ %s: %s\n", r.o.conns2, dp, what, met(dp <= limit))
	}
	if dc, ok := r.addedCPU("two-embedded-execute"); ok {
		fmt.Fprintf(&b, "- added CPU per embedded execute (%d connections): %+.0f µs, target ≤ %d µs: %s\n", r.o.conns2, dc, maxTwoEmbeddedAddedCPU, met(dc <= maxTwoEmbeddedAddedCPU))
	}
	if added, replay, set, ok := r.gatewayCPU(); ok {
		fmt.Fprintf(&b, "- gateway CPU per execute (%s set): plain %+.0f µs, target ≤ plain + %d µs: %s\n", set, added, maxGatewayExecuteAdded, met(added <= maxGatewayExecuteAdded))
		fmt.Fprintf(&b, "- gateway CPU per replay (%s set): %.0f µs, target ≤ %d µs: %s\n", set, replay, maxGatewayReplay, met(replay <= maxGatewayReplay))
	}
	return b.String()
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func (r *report) memoryLine() string {
	m := r.mem
	if m == nil {
		return ""
	}
	return fmt.Sprintf("gateway RSS: %.1f MiB before, %.1f MiB after %d distinct keys (%+.1f MiB; peak %.1f MiB; %.0f keys/s, Go load generator)\n",
		float64(m.before)/1024, float64(m.after)/1024, m.keys, float64(m.after-m.before)/1024, float64(m.peakKB)/1024, float64(m.keys)/m.seconds)
}

// busyLine reports how busy the pinned gateway's CPU was in each pinned
// variant (CPU per request × req/s): near 100% the gateway limited the
// throughput, well below it the other CPU (load generator, upstream,
// Redis) or other work on the machine did.
func (r *report) busyLine() string {
	var parts []string
	for _, v := range r.vs {
		s := r.sum[v.name]
		if v.set != setPinned || s.cpu[procGateway] < 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", strings.TrimPrefix(v.name, "pinned-"), s.cpu[procGateway]*s.rps/1e4))
	}
	if len(parts) == 0 {
		return ""
	}
	return "pinned set, the gateway's CPU busy: " + strings.Join(parts, ", ") + "\n"
}

// generatorLine reports what wrk itself cost per request (part of the
// load µs column), to show that it leaves the CPUs to what is measured.
func (r *report) generatorLine() string {
	var parts []string
	for _, name := range []string{"plain", "execute", "replay"} {
		if s, ok := r.sum[name]; ok && s.cpu[procGen] >= 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f µs", name, s.cpu[procGen]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "wrk's own CPU per request (of the load µs): " + strings.Join(parts, ", ") + "\n"
}

func (r *report) settings() string {
	gen := r.e.loader.describe()
	if _, ok := r.e.loader.(*wrkLoader); ok {
		gen += fmt.Sprintf(", %d threads (1 in the pinned set)", r.e.wrkThreads)
	}
	return fmt.Sprintf("%d rounds × %v per variant (order rotated each round), %d keep-alive connections (%d in the two set), load generator: %s; took %v",
		r.o.rounds, r.o.duration, r.o.conns, r.o.conns2, gen, r.took.Round(time.Second))
}

// text is the console report.
func (r *report) text() string {
	var b strings.Builder
	b.WriteString(r.table(false))
	if t := r.twoTable(false); t != "" {
		fmt.Fprintf(&b, "\n%d connections:\n%s", r.o.conns2, t)
	}
	b.WriteString("\n" + r.ratios())
	b.WriteString(r.sideBySide())
	b.WriteString(r.postgresLines())
	b.WriteString(r.busyLine())
	b.WriteString(r.generatorLine())
	b.WriteString(r.idleLine())
	b.WriteString(r.memoryLine())
	b.WriteString(r.e.floor.line(r.e.dir))
	b.WriteString(r.wait.text())
	b.WriteString(r.goals())
	if r.e.pinMsg != "" {
		b.WriteString("pinned set skipped: " + r.e.pinMsg + "\n")
	}
	fmt.Fprintf(&b, "load average (1 min) %s at the start, %s at the end\n", r.e.loadAvg[0], r.e.loadAvg[1])
	if r.failures != "" {
		b.WriteString("INVALID RUN: " + r.failures + "\n")
	}
	return b.String()
}

// markdown is bench/results.md.
func (r *report) markdown() string {
	goV, caddyV := binaryVersions(r.o.gateway)
	var b strings.Builder
	b.WriteString("# Benchmark results\n\n")
	b.WriteString("Written by `make bench` (bench/main.go); medians over the rounds; how it measures: " +
		"[docs/performance.md](../docs/performance.md). In the shared set every process (load generator, upstream, gateway, Redis) " +
		"shares the same CPUs, so the absolute figures depend on the machine and its load; the ratios are what to compare. " +
		"In the pinned set the gateway has CPU 0 to itself and everything else runs on CPU 1.\n\n")
	fmt.Fprintf(&b, "- machine: %s; load average (1 min) %s at the start, %s at the end\n", machine(), r.e.loadAvg[0], r.e.loadAvg[1])
	fmt.Fprintf(&b, "- gateway: Go %s, Caddy %s (bench driver %s)\n", goV, caddyV, runtime.Version())
	fmt.Fprintf(&b, "- %s\n", r.e.storeMsg)
	fmt.Fprintf(&b, "- %s\n", r.settings())
	if r.o.quiet {
		b.WriteString("- gateway log level WARN (no per-decision log line)\n")
	} else {
		b.WriteString("- gateway log level INFO (one decision line per guarded request, to a file)\n")
	}
	if r.e.pinMsg != "" {
		b.WriteString("- pinned set skipped: " + r.e.pinMsg + "\n")
	}
	b.WriteString("\n" + r.table(true) + "\n")
	b.WriteString("×plain: req/s over the plain variant of the same set. cmds/req: commands Redis ran per request, " +
		"those inside scripts included (INFO commandstats); scripts/req: EVALSHA calls per request, the gateway's round trips " +
		"(both a hair above the exact figure: the requests in flight when a round ends are not counted, their commands are). " +
		"gw, store, load µs: CPU time per request of the gateway, of redis-server and of the load generator with the upstream " +
		"(/proc/PID/stat and the load generator's rusage, 10 ms ticks). +CPU µs: gateway and store CPU per request " +
		"beyond the plain variant of the same set. pg-* variants: cmds/req are the statements Postgres ran per request " +
		"(pg_stat_statements, BEGIN and COMMIT included), store µs the CPU of all the cluster's processes.\n\n")
	if t := r.twoTable(true); t != "" {
		fmt.Fprintf(&b, "At %d keep-alive connections (the two set; requests barely queue for the CPUs):\n\n%s\n", r.o.conns2, t)
		b.WriteString("+p50 ms, +gw µs: what an executing variant adds over two-plain (p50 latency, gateway CPU per request); " +
			"+CPU µs: what any variant costs beyond two-plain in CPU per request, gateway and store together.\n\n")
	}
	b.WriteString("```\n" + r.ratios() + r.sideBySide() + r.postgresLines() + r.wait.text() + "```\n\n")
	b.WriteString(r.goals())
	if l := r.busyLine(); l != "" {
		b.WriteString("- " + l)
	}
	if l := r.generatorLine(); l != "" {
		b.WriteString("- " + l)
	}
	if l := r.idleLine(); l != "" {
		b.WriteString("- " + l)
	}
	if m := r.memoryLine(); m != "" {
		b.WriteString("- " + m)
	}
	if l := r.e.floor.line(r.e.dir); l != "" {
		b.WriteString("- " + l)
	}
	if r.failures != "" {
		b.WriteString("\n**Invalid run:** " + r.failures + "\n")
	}
	return b.String()
}
