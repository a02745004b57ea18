package drill

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/idemgate/idemgate/config"
)

// scenario is one entry of the seed's test list: what happens, what is
// expected (written down before it runs), and the run. Every scenario
// drills one operation of its own.
type scenario struct {
	ops    int
	what   func(d *drill) string
	expect func(d *drill) Expect
	run    func(d *drill, r *Result) error
}

var scenarioByName = map[string]scenario{
	"double_delivery": {1,
		func(*drill) string { return "the same request twice, one after the other" },
		func(*drill) Expect {
			return Expect{Max: 1, Min: 1, Text: "1 record; the second answer a byte-identical replay", State: "completed"}
		},
		runDouble},
	"three_deliveries": {1,
		func(*drill) string { return "the same request delivered three times" },
		func(*drill) Expect {
			return Expect{Max: 1, Min: 1, Text: "1 record; 3 attempts, 1 execution", State: "completed"}
		},
		runThree},
	"parallel": {1,
		func(d *drill) string { return strconv.Itoa(d.file.Parallel) + " identical requests at once" },
		func(d *drill) Expect {
			other := "409 in flight"
			if d.route.OnInFlight == config.OnInFlightWait {
				other = "a wait that ends in the replay (or 409 in flight)"
			}
			return Expect{Max: 1, Min: 1, Text: "1 record; every other answer the replay or " + other, State: "completed"}
		},
		runParallel},
	"upstream_down": {1,
		func(*drill) string {
			return "the upstream refuses twice, answers 503 twice, then comes back; a retry each time"
		},
		func(d *drill) Expect {
			p := downPlan(d)
			if p.held {
				return Expect{Max: 0, Text: "0 records; the retry budget (" + strconv.Itoa(d.route.MaxExecutions) + ") is used up while down", State: "retries_exhausted"}
			}
			t := "0 records while down, 1 after it is back"
			if p.breakerOpen > 0 {
				t += fmt.Sprintf("; the breaker opens after %d failures", d.route.Breaker.Failures)
			}
			return Expect{Max: 1, Min: 1, Text: t, State: "completed"}
		},
		runDown},
	"invalid_field": {1,
		func(*drill) string { return "a request the API rejects, then the same key again" },
		func(*drill) Expect {
			return Expect{Max: 0, Text: "0 records; the retry gets the same answer without reaching the upstream", State: "completed"}
		},
		runInvalid},
	"changed_payload": {1,
		func(*drill) string { return "the same key with another payload" },
		func(*drill) Expect {
			return Expect{Max: 1, Min: 1, Text: "1 record; 422 from the gateway, nothing forwarded", State: "completed"}
		},
		runChanged},
	"lost_answer": {1,
		func(*drill) string { return "the answer is dropped after the upstream acted; then a retry" },
		func(d *drill) Expect {
			return Expect{Max: 1, Min: 1, Text: "1 record, never 2; " + unknownText(d), State: unknownState(d)}
		},
		runLost},
	"slow_upstream": {1,
		func(d *drill) string {
			return "an answer slower than lock_lease (" + d.route.LockLease.String() + "), duplicates meanwhile"
		},
		func(*drill) Expect {
			return Expect{Max: 1, Min: 1, Text: "1 record; the duplicates are not executed", State: "completed"}
		},
		runSlow},
	"gateway_restart": {1,
		func(*drill) string { return "kill -9 of the gateway while the upstream answers slowly; restart; retry" },
		func(d *drill) Expect {
			return Expect{Max: 1, Text: "at most 1 record; still linked to its key after the restart; " + unknownText(d), State: unknownState(d)}
		},
		runRestart},
}

// unknownState is the final state of an operation whose answer was lost,
// per the route.
func unknownState(d *drill) string {
	switch {
	case d.route.Verify != nil:
		return "completed (verified)"
	case d.route.OnUnknownOutcome == config.OnUnknownHold:
		return "outcome_unknown"
	}
	return "completed"
}

func unknownText(d *drill) string {
	switch {
	case d.route.Verify != nil:
		return "verified and completed, retries get the replay"
	case d.route.OnUnknownOutcome == config.OnUnknownHold:
		return "held as outcome unknown (409 with the record id)"
	case d.route.OnUnknownOutcome == config.OnUnknownStore:
		return "the failure stored and replayed"
	}
	return "on_unknown_outcome: release"
}

// settle counts op's records and reads its final state, and checks both
// against r's expectation.
func (d *drill) settle(r *Result, op *operation) error {
	n, err := d.records(r, op)
	if err != nil {
		return err
	}
	r.Records = &n
	if n > r.Expected.Max || n < r.Expected.Min {
		r.fail("%d records, expected %s", n, r.Expected.Text)
	}
	rec, err := d.state(r, op)
	if err != nil {
		return err
	}
	r.State = describeState(rec)
	if r.State != r.Expected.State {
		r.fail("final state %s, expected %s", r.State, r.Expected.State)
	}
	r.UpstreamCalls = d.proxy.countsOf(op.tag).Reached
	return nil
}

func firstOK(r *Result, a answer) bool {
	if !a.ok() || a.kind() != "upstream" {
		r.fail("the first request was answered %s, not a success from the upstream: check the drill file's request", a)
		return false
	}
	return true
}

func sameReplay(r *Result, first, a answer, which string) {
	switch {
	case a.kind() != "replay":
		r.fail("the %s answer is %s, not a replay", which, a)
	case a.status != first.status || !bytes.Equal(a.body, first.body):
		r.fail("the %s answer is a replay that differs from the first answer (status %d, %d bytes; first %d, %d bytes)", which, a.status, len(a.body), first.status, len(first.body))
	}
}

func runDouble(d *drill, r *Result) error {
	op, err := d.newOp(r)
	if err != nil {
		return err
	}
	first := d.send(r, op, nil, "delivery 1")
	firstOK(r, first)
	sameReplay(r, first, d.send(r, op, nil, "delivery 2"), "second")
	return d.settle(r, op)
}

func runThree(d *drill, r *Result) error {
	op, err := d.newOp(r)
	if err != nil {
		return err
	}
	first := d.send(r, op, nil, "delivery 1")
	firstOK(r, first)
	for i := 2; i <= 3; i++ {
		sameReplay(r, first, d.send(r, op, nil, "delivery "+strconv.Itoa(i)), "delivery "+strconv.Itoa(i)+"'s")
	}
	if err := d.settle(r, op); err != nil {
		return err
	}
	if rec, _ := d.gw.record(op.id); rec != nil && (rec.Attempts != 3 || rec.Executions != 1) {
		r.fail("the record counts %d attempts and %d executions, expected 3 and 1", rec.Attempts, rec.Executions)
	}
	return nil
}

func runParallel(d *drill, r *Result) error {
	op, err := d.newOp(r)
	if err != nil {
		return err
	}
	// The first to reach the upstream is held a moment, so that the
	// others arrive while it runs.
	d.proxy.plan(op.tag, step{fault: delayAnswer, delay: 300 * time.Millisecond})
	answers := make([]answer, d.file.Parallel)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = d.send(r, op, nil, "worker "+strconv.Itoa(i+1))
		}()
	}
	close(start)
	wg.Wait()
	kinds := map[string]int{}
	originals := 0
	for _, a := range answers {
		k := a.kind()
		if k == "upstream" && a.ok() {
			originals++
		}
		kinds[k]++
	}
	if originals != 1 {
		r.fail("%d of %d answers came from the upstream's execution, expected 1", originals, len(answers))
	}
	if other := len(answers) - originals - kinds["replay"] - kinds["in-flight"]; other > 0 {
		r.fail("%d answers are neither the execution, its replay nor 409 in flight (%v)", other, kinds)
	}
	return d.settle(r, op)
}

// down is the plan of upstream_down as the route says it goes: which
// retries the breaker answers, and whether the budget runs out.
type down struct {
	breakerOpen int  // down retries the open breaker answers
	held        bool // the budget is used up while down
	execs       int  // executions while down
}

const downRetries = 4 // 2 refused, 2 answered 503

func downPlan(d *drill) down {
	var p down
	open := false
	for range downRetries {
		switch {
		case p.held:
		case open:
			p.breakerOpen++
		default:
			p.execs++
			p.held = p.execs >= d.route.MaxExecutions
			open = d.route.Breaker != nil && p.execs >= d.route.Breaker.Failures
		}
	}
	return p
}

func runDown(d *drill, r *Result) error {
	op, err := d.newOp(r)
	if err != nil {
		return err
	}
	plan := downPlan(d)
	d.proxy.refuse()
	d.note(r, "proxy: refusing connections")
	var downAnswers []answer
	for i := range 2 {
		downAnswers = append(downAnswers, d.send(r, op, nil, "retry "+strconv.Itoa(i+1)+" (refused)"))
	}
	if err := d.proxy.resume(); err != nil {
		return err
	}
	d.proxy.plan(op.tag, step{fault: unavailable}, step{fault: unavailable})
	d.note(r, "proxy: listening again, answering 503 with Retry-After")
	for i := 2; i < downRetries; i++ {
		downAnswers = append(downAnswers, d.send(r, op, nil, "retry "+strconv.Itoa(i+1)+" (503)"))
	}
	kinds := map[string]int{}
	for _, a := range downAnswers {
		if a.ok() {
			r.fail("a retry while the upstream was down was answered %s", a)
		}
		kinds[a.kind()]++
	}
	if kinds["breaker-open"] != plan.breakerOpen {
		r.fail("the breaker answered %d retries while down, expected %d (route %s's retry.breaker)", kinds["breaker-open"], plan.breakerOpen, d.route.Name)
	}
	if c := d.proxy.countsOf(op.tag); c.Reached != 0 {
		r.fail("%d requests reached the upstream while it was down", c.Reached)
	}
	n, err := d.records(r, op)
	if err != nil {
		return err
	}
	if n != 0 {
		r.fail("%d records while the upstream was down, expected 0", n)
	}
	d.proxy.clear(op.tag)
	d.note(r, "proxy: the upstream is back")
	// Back: retry until the breaker lets a probe through (its Retry-After).
	deadline := time.Now().Add(maxScenario / 2)
	for i := 0; i < 10; i++ {
		a := d.send(r, op, nil, "retry after the upstream is back")
		if a.kind() != "breaker-open" || time.Now().After(deadline) {
			if !plan.held && !a.ok() {
				r.fail("the retry after the upstream came back was answered %s", a)
			}
			if plan.held && a.kind() != "retries-exhausted" {
				r.fail("the retry after the budget was used up was answered %s, not 409 retries-exhausted", a)
			}
			break
		}
		wait, _ := strconv.Atoi(a.header.Get("Retry-After"))
		time.Sleep(time.Duration(min(max(wait, 1), 30)) * time.Second)
	}
	r.RecordsNote = "0 while down"
	return d.settle(r, op)
}

func runInvalid(d *drill, r *Result) error {
	op, err := d.newOp(r)
	if err != nil {
		return err
	}
	body, err := d.mutated(op, d.file.Invalid)
	if err != nil {
		return err
	}
	first := d.send(r, op, body, "the invalid request")
	switch {
	case first.ok():
		r.fail("the API accepted the invalid request (%s): the drill file's invalid is not invalid", first)
	case first.err != nil || first.kind() != "upstream":
		r.fail("the invalid request was answered %s, not by the API", first)
	}
	sameReplay(r, first, d.send(r, op, body, "the same key again"), "retry's")
	if c := d.proxy.countsOf(op.tag); c.Reached != 1 {
		r.fail("the upstream was reached %d times, expected once", c.Reached)
	}
	return d.settle(r, op)
}

// changedMutation is changed_payload's default: a field added to a JSON
// body.
var changedMutation = &Mutation{Set: map[string]string{"drill_changed": "true"}}

func runChanged(d *drill, r *Result) error {
	op, err := d.newOp(r)
	if err != nil {
		return err
	}
	m := d.file.Changed
	if m == nil {
		if !gjson.ValidBytes(op.body) || !gjson.ParseBytes(op.body).IsObject() {
			return fmt.Errorf("changed_payload: the request body is not a JSON object; give changed in the drill file")
		}
		m = changedMutation
	}
	body, err := d.mutated(op, m)
	if err != nil {
		return err
	}
	firstOK(r, d.send(r, op, nil, "the request"))
	if a := d.send(r, op, body, "the same key, another payload"); a.status != 422 || a.kind() != "key-reused" {
		r.fail("the changed payload was answered %s, expected 422 key-reused from the gateway", a)
	}
	if c := d.proxy.countsOf(op.tag); c.Reached != 1 {
		r.fail("the upstream was reached %d times, expected once (the changed payload must not be forwarded)", c.Reached)
	}
	return d.settle(r, op)
}

// verifyWindow bounds the wait for a verification to settle a record.
func (d *drill) verifyWindow() time.Duration {
	v := d.route.Verify
	if v == nil {
		return 0
	}
	return min(v.After+v.Every*time.Duration(v.Attempts)+5*time.Second, maxScenario/2)
}

// afterUnknown checks the retry of an operation whose answer was lost:
// it waits for verification where the route has it, then retries.
func (d *drill) afterUnknown(r *Result, op *operation) {
	if d.route.Verify != nil {
		d.note(r, "waiting for the gateway's verification")
		rec, err := d.waitState(op, d.verifyWindow(), func(rec *record) bool {
			return rec != nil && rec.State != "outcome_unknown" && rec.State != "in_flight"
		})
		if err != nil || rec == nil || rec.State != "completed" {
			r.fail("verification did not complete the record (state %s)", describeState(rec))
		}
	}
	a := d.send(r, op, nil, "retry")
	switch {
	case d.route.Verify != nil || d.route.OnUnknownOutcome == config.OnUnknownStore:
		if a.kind() != "replay" {
			r.fail("the retry was answered %s, expected the replay", a)
		}
	case d.route.OnUnknownOutcome == config.OnUnknownHold:
		if a.status != 409 || a.kind() != "outcome-unknown" {
			r.fail("the retry was answered %s, expected 409 outcome-unknown", a)
		} else if id := gjson.GetBytes(a.body, "record_id").String(); id != op.id {
			r.fail("the 409's record_id is not the record of the operation's key")
		}
	}
}

func runLost(d *drill, r *Result) error {
	op, err := d.newOp(r)
	if err != nil {
		return err
	}
	d.proxy.plan(op.tag, step{fault: dropAnswer})
	if a := d.send(r, op, nil, "the request"); a.ok() {
		r.fail("the request was answered %s although its answer was dropped", a)
	}
	if c := d.proxy.countsOf(op.tag); c.Dropped != 1 || c.OK != 1 {
		return fmt.Errorf("the proxy dropped %d answers, %d of them 2xx: the upstream did not act as the scenario needs", c.Dropped, c.OK)
	}
	d.afterUnknown(r, op)
	return d.settle(r, op)
}

// maxSlow bounds how long the drill holds an answer for slow_upstream.
const maxSlow = time.Minute

func runSlow(d *drill, r *Result) error {
	lease := d.route.LockLease
	if lease+time.Second > maxSlow {
		r.Skipped = fmt.Sprintf("lock_lease %s is longer than the drill holds an answer (%s)", lease, maxSlow)
		return nil
	}
	op, err := d.newOp(r)
	if err != nil {
		return err
	}
	d.proxy.plan(op.tag, step{fault: delayAnswer, delay: lease + time.Second})
	done := make(chan answer, 1)
	go func() { done <- d.send(r, op, nil, "the request") }()
	if !d.proxy.waitAnswered(op.tag, 1, maxSlow) {
		return fmt.Errorf("the upstream did not answer the request within %s", maxSlow)
	}
	acted := time.Now()
	for _, at := range []time.Duration{0, lease / 2, lease + 200*time.Millisecond} {
		time.Sleep(time.Until(acted.Add(at)))
		a := d.send(r, op, nil, "duplicate at "+at.String())
		if k := a.kind(); k != "in-flight" && k != "replay" {
			r.fail("a duplicate during the slow answer was answered %s, expected 409 in flight or the replay", a)
		}
	}
	if a := <-done; !a.ok() || a.kind() != "upstream" {
		r.fail("the slow request was answered %s", a)
	}
	if c := d.proxy.countsOf(op.tag); c.Reached != 1 {
		r.fail("the upstream was reached %d times, expected once", c.Reached)
	}
	return d.settle(r, op)
}

func runRestart(d *drill, r *Result) error {
	op, err := d.newOp(r)
	if err != nil {
		return err
	}
	d.proxy.plan(op.tag, step{fault: delayAnswer, delay: maxScenario})
	done := make(chan answer, 1)
	go func() { done <- d.send(r, op, nil, "the request") }()
	if !d.proxy.waitAnswered(op.tag, 1, maxSlow) {
		return fmt.Errorf("the upstream did not answer the request within %s", maxSlow)
	}
	d.gw.kill()
	d.note(r, "gateway: killed (SIGKILL) while the answer was held")
	<-done
	if err := d.gw.start(); err != nil {
		return fmt.Errorf("%w: %v", errNoGateway, err)
	}
	d.note(r, "gateway: restarted on the same store")
	// The dead process's claim holds the key until its lease runs out.
	rec, err := d.state(r, op)
	switch {
	case err != nil:
		return err
	case rec == nil:
		r.fail("after the restart the admin API has no record for the operation's key")
	case rec.State == "in_flight":
		time.Sleep(min(time.Until(rec.LeaseUntil)+100*time.Millisecond, d.route.LockLease+time.Second))
		// The next request finds the lease run out: the outcome is unknown.
		d.send(r, op, nil, "retry after the lease ran out")
	}
	d.afterUnknown(r, op)
	return d.settle(r, op)
}
