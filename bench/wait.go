package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// slowCall is how long the upstream takes to answer POST /v1/slow.
const slowCall = 300 * time.Millisecond

// waitResult is what duplicates waiting for one slow call cost: how long
// after the upstream answered each got its replay, and what Redis ran
// while they waited (one claim each, one read each after the notice, and
// the first's completion with its notice).
type waitResult struct {
	store     string
	rounds    int
	waiters   int // per round
	after     []time.Duration
	cmds      commandStats // over all rounds
	bad       int          // answers that were not the replay
	firstErrs []string
}

// waitPath runs rounds of the wait measurement on v's site: a first
// request to /v1/slow, then o.waiters duplicates sent together while it
// runs, on connections of their own.
func (e *env) waitPath(o options, site string) (*waitResult, error) {
	url := "http://" + e.gw.sites[site] + "/v1/slow"
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.waiters + 1}}
	defer client.CloseIdleConnections()
	res := &waitResult{store: site, rounds: o.waitRounds, waiters: o.waiters}
	post := func(key string) (int, string, []byte, error) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(requestBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer bench")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b, err
	}
	fmt.Printf("wait path: %d rounds of %d duplicates waiting for one %v call (%s store)\n", o.waitRounds, o.waiters, slowCall, site)
	for r := range o.waitRounds {
		key := fmt.Sprintf("w-%s-%d", e.runID, r)
		var before commandStats
		first := make(chan []byte, 1)
		go func() {
			_, _, b, _ := post(key)
			first <- b
		}()
		time.Sleep(slowCall / 3) // the first is in flight
		if e.redis != nil {
			before, _ = e.redis.commandStats()
		}
		var wg sync.WaitGroup
		at := make([]time.Time, o.waiters)
		bodies := make([][]byte, o.waiters)
		ok := make([]bool, o.waiters)
		for i := range o.waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, replayed, b, err := post(key)
				at[i], bodies[i] = time.Now(), b
				ok[i] = err == nil && status == http.StatusCreated && replayed == "true"
				if !ok[i] && len(res.firstErrs) < 3 {
					res.firstErrs = append(res.firstErrs, fmt.Sprintf("status %d replayed %q err %v", status, replayed, err))
				}
			}()
		}
		wg.Wait()
		want := <-first
		if e.redis != nil {
			after, _ := e.redis.commandStats()
			d := after.sub(before)
			res.cmds.commands += d.commands
			res.cmds.scripts += d.scripts
		}
		answered := time.Unix(0, e.up.slowAnswered.Load())
		for i := range o.waiters {
			if !ok[i] || !bytes.Equal(bodies[i], want) {
				res.bad++
				continue
			}
			res.after = append(res.after, at[i].Sub(answered))
		}
	}
	slices.Sort(res.after)
	return res, nil
}

// text is the wait path's lines of the report.
func (w *waitResult) text() string {
	if w == nil {
		return ""
	}
	n := len(w.after)
	s := fmt.Sprintf("wait path (%s store): %d rounds × %d duplicates waiting for one %v call; %d got another answer than the replay\n",
		w.store, w.rounds, w.waiters, slowCall, w.bad)
	if n > 0 {
		s += fmt.Sprintf("  replay after the upstream answered: median %v, p90 %v, max %v\n",
			w.after[n/2].Round(10*time.Microsecond), w.after[n*9/10].Round(10*time.Microsecond), w.after[n-1].Round(10*time.Microsecond))
	}
	if total := w.rounds * w.waiters; total > 0 && w.cmds.commands > 0 {
		s += fmt.Sprintf("  Redis per waiting request (the first's completion and its notice included): %.2f commands with those inside scripts, %.2f script calls\n",
			float64(w.cmds.commands)/float64(total), float64(w.cmds.scripts)/float64(total))
	}
	for _, e := range w.firstErrs {
		s += "  unexpected answer: " + e + "\n"
	}
	return s
}
