package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// target is one of the performance goals, reported (never asserted).
type target struct {
	name  string // "execute/plain"
	num   string // variant whose req/s is divided by plain's
	min   float64
	label string
}

var targets = []target{
	{"execute/plain", "execute", 0.85, "≥ 0.85"},
	{"replay/plain", "replay", 2.0, "≥ 2"},
	{"passthrough/plain", "passthrough", 0.98, "≥ 0.98"},
}

// maxAddedP50 is the goal for the p50 the gateway adds on the execute path.
const maxAddedP50 = 0.3 // ms

type report struct {
	o        options
	e        *env
	vs       []variant
	sum      map[string]variantSummary
	rounds   map[string][]roundStats
	mem      *memoryResult
	idle     map[string][]roundStats // plain and execute on one connection
	ping     time.Duration           // p50 of a bare EVALSHA round trip from the load generator (0: none)
	took     time.Duration
	failures string // non-empty when answers were wrong: the run is invalid
}

func buildReport(o options, e *env, vs []variant, rounds map[string][]roundStats, mem *memoryResult, took time.Duration) *report {
	r := &report{o: o, e: e, vs: vs, rounds: rounds, mem: mem, took: took, sum: map[string]variantSummary{}}
	var fails []string
	for _, v := range vs {
		s := summarizeRounds(rounds[v.name])
		r.sum[v.name] = s
		// A few errors at the very end of a round (a connection cut while
		// the next round starts) are tolerated; wrong answers are not.
		if s.bad > 0 || s.errors*1000 > s.requests {
			fails = append(fails, fmt.Sprintf("%s: %d unexpected answers, %d errors of %d requests", v.name, s.bad, s.errors, s.requests))
		}
	}
	if mem != nil && mem.bad > 0 {
		fails = append(fails, fmt.Sprintf("memory phase: %d unexpected answers or errors", mem.bad))
	}
	r.failures = strings.Join(fails, "; ")
	return r
}

// ratio returns num's median req/s over plain's, and whether both ran.
func (r *report) ratio(num string) (float64, bool) {
	p, okp := r.sum["plain"]
	n, okn := r.sum[num]
	if !okp || !okn || p.rps == 0 {
		return 0, false
	}
	return n.rps / p.rps, true
}

// roundRatios returns the per-round ratio range (min, max) of num to plain.
func (r *report) roundRatios(num string) (lo, hi float64, ok bool) {
	pr, nr := r.rounds["plain"], r.rounds[num]
	for i := range min(len(pr), len(nr)) {
		if pr[i].rps == 0 {
			continue
		}
		x := nr[i].rps / pr[i].rps
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

// idleLine reports the latency the gateway adds with one connection.
func (r *report) idleLine() string {
	p, x := r.idle["plain"], r.idle["execute"]
	if len(p) == 0 || len(x) == 0 {
		return ""
	}
	ps, xs := summarizeRounds(p), summarizeRounds(x)
	ping := ""
	if r.ping > 0 {
		ping = fmt.Sprintf("; one bare EVALSHA round trip to Redis: %.3f ms", ms(r.ping))
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
		fmt.Fprintf(&b, "%-12s %8s %7s %7s %7s %9s %9s %7s %8s %8s  %s\n", cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6], cells[7], cells[8], cells[9], cells[10])
	}
	row("variant", "req/s", "p50 ms", "p99 ms", "×plain", "Redis/req", "script µs", "gw µs", "redis µs", "load µs", "answers")
	if md {
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	}
	plain := r.sum["plain"].rps
	for _, v := range r.vs {
		s := r.sum[v.name]
		x := "-"
		if plain > 0 {
			x = fmt.Sprintf("%.2f", s.rps/plain)
		}
		cpr := "-"
		if s.redisCPR >= 0 {
			cpr = fmt.Sprintf("%.2f", s.redisCPR)
		}
		ans := fmt.Sprintf("%d", v.wantStatus)
		if v.wantReplayed {
			ans += " replayed"
		}
		if s.bad > 0 || s.errors > 0 {
			ans += fmt.Sprintf(" (%d wrong, %d errors)", s.bad, s.errors)
		}
		sus := "-"
		if s.scriptUS >= 0 {
			sus = fmt.Sprintf("%.1f", s.scriptUS)
		}
		cpu := func(i int) string {
			if s.cpu[i] < 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f", s.cpu[i])
		}
		row(v.name, fmt.Sprintf("%.0f", s.rps), fmt.Sprintf("%.2f", s.p50), fmt.Sprintf("%.2f", s.p99), x, cpr, sus,
			cpu(procGateway), cpu(procRedis), cpu(procBench), ans)
	}
	return b.String()
}

// ratios are the lines scripts grep for: "ratio execute/plain 0.91".
func (r *report) ratios() string {
	var b strings.Builder
	for _, t := range targets {
		if x, ok := r.ratio(t.num); ok {
			fmt.Fprintf(&b, "ratio %s %.2f\n", t.name, x)
		}
	}
	if d, ok := r.addedP50(); ok {
		fmt.Fprintf(&b, "added p50 execute-plain %.2f ms\n", d)
	}
	return b.String()
}

func (r *report) goals() string {
	var b strings.Builder
	for _, t := range targets {
		x, ok := r.ratio(t.num)
		if !ok {
			continue
		}
		lo, hi, _ := r.roundRatios(t.num)
		fmt.Fprintf(&b, "- %s: %.2f (rounds %.2f–%.2f), target %s: %s\n", t.name, x, lo, hi, t.label, met(x >= t.min))
	}
	if d, ok := r.addedP50(); ok {
		fmt.Fprintf(&b, "- added p50 on the execute path: %.2f ms, target ≤ %.1f ms: %s\n", d, maxAddedP50, met(d <= maxAddedP50))
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
	return fmt.Sprintf("gateway RSS: %.1f MiB before, %.1f MiB after %d distinct keys (%+.1f MiB; peak %.1f MiB; %.0f keys/s)\n",
		float64(m.before)/1024, float64(m.after)/1024, m.keys, float64(m.after-m.before)/1024, float64(m.peakKB)/1024, float64(m.keys)/m.seconds)
}

func (r *report) settings() string {
	return fmt.Sprintf("%d rounds × %v per variant (order rotated each round), %d keep-alive connections, Go load generator, took %v",
		r.o.rounds, r.o.duration, r.o.conns, r.took.Round(time.Second))
}

// text is the console report.
func (r *report) text() string {
	var b strings.Builder
	b.WriteString(r.table(false))
	b.WriteString("\n" + r.ratios())
	b.WriteString(r.idleLine())
	b.WriteString(r.memoryLine())
	b.WriteString(r.goals())
	if r.failures != "" {
		b.WriteString("INVALID RUN: " + r.failures + "\n")
	}
	return b.String()
}

// markdown is bench/results.md.
func (r *report) markdown() string {
	goV, caddyV, _ := binaryVersions(r.o.gateway)
	var b strings.Builder
	b.WriteString("# Benchmark results\n\n")
	b.WriteString("Written by `make bench` (bench/main.go); medians over the rounds. " +
		"Every process (load generator, upstream, gateway, Redis) shares the same CPUs, " +
		"so the absolute figures depend on the machine and its load; the ratios are what to compare.\n\n")
	fmt.Fprintf(&b, "- machine: %s\n", machine())
	fmt.Fprintf(&b, "- gateway: Go %s, Caddy %s (bench driver %s)\n", goV, caddyV, runtime.Version())
	fmt.Fprintf(&b, "- %s\n", r.e.storeMsg)
	fmt.Fprintf(&b, "- %s\n", r.settings())
	if r.o.quiet {
		b.WriteString("- gateway log level WARN (no per-decision log line)\n")
	} else {
		b.WriteString("- gateway log level INFO (one decision line per guarded request, to a file)\n")
	}
	b.WriteString("\n" + r.table(true) + "\n")
	b.WriteString("Redis/req: EVALSHA calls per request (INFO commandstats; a little above the exact figure, because the requests " +
		"still in flight when a round ends are not counted but their calls are); script µs: Redis's time per call inside the script. gw, redis, load µs: CPU time per request " +
		"of the gateway, of redis-server and of the load generator with the upstream (/proc/PID/stat, 10 ms ticks).\n\n")
	b.WriteString("```\n" + r.ratios() + "```\n\n")
	b.WriteString(r.goals())
	if l := r.idleLine(); l != "" {
		b.WriteString("- " + l)
	}
	if m := r.memoryLine(); m != "" {
		b.WriteString("- " + m)
	}
	if r.failures != "" {
		b.WriteString("\n**Invalid run:** " + r.failures + "\n")
	}
	return b.String()
}
