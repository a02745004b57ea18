package main

import (
	"slices"
	"time"
)

// percentile returns the q-quantile (0 <= q <= 1) of sorted by the
// nearest-rank method; 0 for no samples.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// median returns the median of xs (the mean of the middle two for an even
// count); 0 for none. xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// roundStats is what one round of one variant measured.
type roundStats struct {
	rps      float64
	p50, p99 time.Duration
	requests int
	errors   int
	bad      int     // answers with an unexpected status or replay flag
	redisCPR float64 // Redis commands per request (-1: not measured)
	scriptUS float64 // µs Redis spent per script call (-1: none)
	upConns  int     // connections the upstream accepted
	// cpu is the CPU time per request of each process (-1: not measured).
	cpu [numProcs]time.Duration
}

// The processes whose CPU time is measured.
const (
	procGateway = iota
	procRedis
	procBench // load generator and upstream
	numProcs
)

func summarize(r *loadResult, bad int, scripts *scriptStats) roundStats {
	slices.Sort(r.latencies)
	st := roundStats{
		rps:      r.rps(),
		p50:      percentile(r.latencies, 0.50),
		p99:      percentile(r.latencies, 0.99),
		requests: r.requests,
		errors:   r.errors,
		bad:      bad,
		redisCPR: -1,
		scriptUS: -1,
		cpu:      [numProcs]time.Duration{-1, -1, -1},
	}
	if scripts != nil && r.requests > 0 {
		st.redisCPR = float64(scripts.calls) / float64(r.requests)
		if scripts.calls > 0 {
			st.scriptUS = float64(scripts.usec) / float64(scripts.calls)
		}
	}
	return st
}

// variantSummary is the medians over a variant's rounds.
type variantSummary struct {
	rps, p50, p99 float64 // req/s, milliseconds
	redisCPR      float64 // -1: not measured
	scriptUS      float64 // -1: not measured
	requests      int     // over all rounds
	errors, bad   int
	cpu           [numProcs]float64 // µs per request (-1: not measured)
}

func summarizeRounds(rounds []roundStats) variantSummary {
	var rps, p50, p99, cpr, sus []float64
	var cpu [numProcs][]float64
	var s variantSummary
	for _, r := range rounds {
		for i, d := range r.cpu {
			if d >= 0 {
				cpu[i] = append(cpu[i], float64(d)/float64(time.Microsecond))
			}
		}
		rps = append(rps, r.rps)
		p50 = append(p50, ms(r.p50))
		p99 = append(p99, ms(r.p99))
		if r.redisCPR >= 0 {
			cpr = append(cpr, r.redisCPR)
		}
		if r.scriptUS >= 0 {
			sus = append(sus, r.scriptUS)
		}
		s.requests += r.requests
		s.errors += r.errors
		s.bad += r.bad
	}
	s.rps, s.p50, s.p99 = median(rps), median(p50), median(p99)
	for i := range cpu {
		s.cpu[i] = -1
		if len(cpu[i]) > 0 {
			s.cpu[i] = median(cpu[i])
		}
	}
	s.redisCPR, s.scriptUS = -1, -1
	if len(cpr) > 0 {
		s.redisCPR = median(cpr)
	}
	if len(sus) > 0 {
		s.scriptUS = median(sus)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
