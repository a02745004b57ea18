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
	bad      int     // answers with an unexpected status or replay flag, or wrong upstream calls
	cmdsPR   float64 // Redis commands per request, inner ones included (-1: not measured)
	scriptPR float64 // Redis script calls per request (-1: not measured)
	upConns  int     // connections the upstream accepted
	walPR    float64 // Postgres WAL bytes per request (-1: not measured)
	// cpu is the CPU time per request of each process (-1: not measured).
	cpu [numProcs]time.Duration
}

// The processes whose CPU time is measured.
const (
	procGateway = iota
	procRedis
	procBench // load generator (this process or wrk) and upstream
	procGen   // of those, the load generator's own process (wrk; -1 for the Go generator)
	numProcs
)

func summarize(r *loadResult, bad int, redisWork *commandStats) roundStats {
	st := roundStats{
		rps:      r.rps(),
		p50:      r.p50,
		p99:      r.p99,
		requests: r.requests,
		errors:   r.errors,
		bad:      bad,
		cmdsPR:   -1,
		scriptPR: -1,
		walPR:    -1,
		cpu:      [numProcs]time.Duration{-1, -1, -1, -1},
	}
	if redisWork != nil && r.requests > 0 {
		st.cmdsPR = float64(redisWork.commands) / float64(r.requests)
		st.scriptPR = float64(redisWork.scripts) / float64(r.requests)
	}
	return st
}

// variantSummary is the medians over a variant's rounds.
type variantSummary struct {
	rps, p50, p99 float64 // req/s, milliseconds
	cmdsPR        float64 // -1: not measured
	scriptPR      float64 // -1: not measured
	walPR         float64 // Postgres WAL bytes per request (-1: not measured)
	requests      int     // over all rounds
	errors, bad   int
	cpu           [numProcs]float64 // µs per request (-1: not measured)
}

func summarizeRounds(rounds []roundStats) variantSummary {
	var rps, p50, p99, cpr, sus, wal []float64
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
		if r.cmdsPR >= 0 {
			cpr = append(cpr, r.cmdsPR)
		}
		if r.scriptPR >= 0 {
			sus = append(sus, r.scriptPR)
		}
		if r.walPR >= 0 {
			wal = append(wal, r.walPR)
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
	s.cmdsPR, s.scriptPR = -1, -1
	if len(cpr) > 0 {
		s.cmdsPR = median(cpr)
	}
	if len(sus) > 0 {
		s.scriptPR = median(sus)
	}
	s.walPR = -1
	if len(wal) > 0 {
		s.walPR = median(wal)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
