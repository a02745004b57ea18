package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/redis"
)

// The soak: two gateways share one durable redis-server in front of the
// chaos upstream (soakupstream_test.go). Workers deliver many keys several
// times each, sequentially and in staggered parallel bursts, sometimes with a
// changed payload, while Redis is restarted. At the end every key is checked
// against the store's record and the upstream's own count of calls
// (soakCheck):
//
//   - executions: once a call ended in an outcome the route keeps (a 201; a
//     500 or a dropped connection under hold or store) the upstream is never
//     called again for that key; calls after a 429, or after a 500 or a drop
//     under release, are allowed, until the retry budget is used up: the
//     soakMaxExecutions-th 429 (under release, 429, 500 or drop: the
//     unknown outcomes release lets go count too) holds the record as
//     retries exhausted (on a key with store trouble, up to that many
//     later as failed recordings hid). Under release, a completion the gateway logged it
//     could not record (Redis down) may be followed by one more.
//     A changed payload never reaches the upstream. The record never counts
//     fewer executions than the upstream saw; for keys without store trouble
//     it counts exactly the upstream's calls and the answered deliveries.
//   - state: every record is completed, outcome_unknown or released, and is
//     the one the last call's outcome and the policy call for, holding that
//     call's status and body; keys never forwarded have no completed record.
//     Keys whose store calls failed (from the gateways' logs) may instead be
//     held as outcome_unknown (not under release, which holds only for the
//     retry budget).
//     An exhausted record counts exactly soakMaxExecutions not-done
//     executions; a record left by a 429 on a key without store trouble
//     counts one per 429 the upstream answered.
//   - answers: replays are the stored result byte for byte; a changed payload
//     gets 422; nothing else than the statuses the faults explain.
//
// Failed store calls are read from the gateways' log messages: if these
// change, fewer keys count as troubled and the check gets stricter, not
// weaker.
//
// IDEMGATE_SOAK_DURATION sets how long traffic runs (default 10s, which is
// what `make test` runs; `make soak` runs 60s). IDEMGATE_SOAK_SEED replays a
// fault pattern: the upstream's action for a key's n-th call depends only on
// the seed, the key and n.
const (
	soakDefaultDuration = 10 * time.Second
	// soakLease is every route's lock_lease.
	soakLease = 2 * time.Second
	// soakSlowCall is longer than the lease: only renewal keeps a slow call
	// from being taken over by a duplicate that arrives after the lease.
	soakSlowCall = 2500 * time.Millisecond
	soakWorkers  = 64
	// soakOutage is how long Redis stays down at each restart.
	soakOutage = 300 * time.Millisecond
	// soakMaxScenarios bounds each worker's loop besides the deadline.
	soakMaxScenarios = 1_000_000
	// soakShowViolations is how many violations are listed in the output.
	soakShowViolations = 40
	// soakMaxExecutions is every route's retry budget (retry.max_executions
	// in soakRules): the execution that makes this many "not done" (429)
	// holds the record as retries exhausted. Below the default of 5, so
	// that a soak of a few thousand deliveries meets it.
	soakMaxExecutions = 3
)

var soakRules = fmt.Sprintf(`
defaults:
  ttl: 1h
  hold_ttl: 2h
  lock_lease: 2s
  retry_statuses: [429, 503]
  retry: { max_executions: %d }
routes:
  - name: soak_hold
    match: { methods: [POST], path: /hold }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: hold
  - name: soak_release
    match: { methods: [POST], path: /release }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: release
  - name: soak_store
    match: { methods: [POST], path: /store }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: store
`, soakMaxExecutions)

// soakPolicy is one route of soakRules.
type soakPolicy struct {
	onUnknown string // the route's on_unknown_outcome
	route     string
	path      string
}

var soakPolicies = []soakPolicy{
	{"hold", "soak_hold", "/hold"},
	{"release", "soak_release", "/release"},
	{"store", "soak_store", "/store"},
}

// soakKey is one logical operation and everything its clients saw.
type soakKey struct {
	name    string
	policy  *soakPolicy
	auth    string
	id      string // the record id the gateway must use
	payload []byte
	changed []byte // same key, different payload: must get 422

	mu         sync.Mutex
	deliveries []soakDelivery
}

// soakDelivery is one request and its answer.
type soakDelivery struct {
	changed  bool // sent the changed payload
	err      string
	status   int
	replayed bool
	problem  string // the problem type's fragment, e.g. "in-flight"
	recordID string
	body     []byte
}

// answered reports whether a delivery of the original payload got an answer
// other than 503: the key's record exists from then on, so a changed payload
// can only meet it.
func (k *soakKey) answered() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, d := range k.deliveries {
		if !d.changed && d.err == "" && d.status != http.StatusServiceUnavailable {
			return true
		}
	}
	return false
}

func (k *soakKey) snapshot() []soakDelivery {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]soakDelivery(nil), k.deliveries...)
}

type soakRun struct {
	seed   uint64
	gws    []*gateway
	client *http.Client

	mu      sync.Mutex
	keys    []*soakKey
	retired []*soakKey // keys whose first scenario ended: late retries pick from here
}

func (s *soakRun) newKey(r *rand.Rand, worker, n int) *soakKey {
	p := &soakPolicies[r.IntN(len(soakPolicies))]
	name := fmt.Sprintf("soak-%d-w%d-%d", s.seed, worker, n)
	amount := 1 + r.IntN(100_000)
	k := &soakKey{
		name:    name,
		policy:  p,
		auth:    fmt.Sprintf("Bearer soak-client-%d", worker%3),
		payload: soakBody(name, amount, "original"),
		changed: soakBody(name, amount+1, "changed"),
	}
	k.id = recordID(p.route, k.auth, name)
	s.mu.Lock()
	s.keys = append(s.keys, k)
	s.mu.Unlock()
	return k
}

func soakBody(key string, amount int, variant string) []byte {
	b, _ := json.Marshal(soakPayload{Key: key, Amount: amount, Variant: variant})
	return b
}

// oldKey returns a random key from an earlier scenario, or nil.
func (s *soakRun) oldKey(r *rand.Rand) *soakKey { return pick(&s.mu, &s.retired, r) }

func (s *soakRun) retire(k *soakKey) {
	s.mu.Lock()
	s.retired = append(s.retired, k)
	s.mu.Unlock()
}

// deliver sends one delivery of k through gateway gw and records the answer.
func (s *soakRun) deliver(k *soakKey, gw int, changed bool) {
	d := soakDelivery{changed: changed}
	body := k.payload
	if changed {
		body = k.changed
	}
	req, err := http.NewRequest(http.MethodPost, s.gws[gw].url+k.policy.path, bytes.NewReader(body))
	if err != nil {
		d.err = err.Error()
	} else {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", k.auth)
		req.Header.Set("Idempotency-Key", k.name)
		resp, err := s.client.Do(req)
		if err != nil {
			d.err = err.Error()
		} else {
			d.body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				d.err = "reading the answer: " + err.Error()
			}
			d.status = resp.StatusCode
			d.replayed = resp.Header.Get("Idempotent-Replayed") == "true"
			if resp.Header.Get("Content-Type") == "application/problem+json" {
				var p struct {
					Type     string `json:"type"`
					RecordID string `json:"record_id"`
				}
				_ = json.Unmarshal(d.body, &p)
				_, d.problem, _ = strings.Cut(p.Type, "#")
				d.recordID = p.RecordID
			}
		}
	}
	k.mu.Lock()
	k.deliveries = append(k.deliveries, d)
	k.mu.Unlock()
}

// worker runs scenarios until the deadline.
func (s *soakRun) worker(w int, deadline time.Time) {
	r := rand.New(rand.NewPCG(s.seed, uint64(w)))
	for i := 0; i < soakMaxScenarios && time.Now().Before(deadline); i++ {
		s.scenario(r, w, i, deadline)
	}
}

// scenario delivers one key several times: a new key, or (one in five) a
// late retry of an earlier one; sequentially or in a staggered parallel
// burst spread over both gateways; sometimes followed by a changed payload.
// Nothing new is sent after the deadline.
func (s *soakRun) scenario(r *rand.Rand, w, i int, deadline time.Time) {
	k, fresh := (*soakKey)(nil), true
	if r.IntN(5) == 0 {
		k, fresh = s.oldKey(r), false
	}
	if k == nil {
		k, fresh = s.newKey(r, w, i), true
	}
	n := 1 + r.IntN(4)
	if !fresh {
		n = 1 + r.IntN(2)
	}
	if r.IntN(3) == 0 {
		n++
		var wg sync.WaitGroup
		for j := range n {
			gw, delay := r.IntN(len(s.gws)), time.Duration(0)
			switch {
			case j == 0:
			case r.IntN(4) == 0:
				// Some duplicates land after a slow call's first lease ran
				// out: only renewal keeps them from taking it over.
				delay = time.Duration(r.Int64N(int64(soakLease + soakLease/2)))
			default:
				delay = time.Duration(r.Int64N(int64(50 * time.Millisecond)))
			}
			wg.Go(func() {
				time.Sleep(delay)
				if time.Now().Before(deadline) {
					s.deliver(k, gw, false)
				}
			})
		}
		wg.Wait()
	} else {
		for j := 0; j < n && time.Now().Before(deadline); j++ {
			s.deliver(k, r.IntN(len(s.gws)), false)
			time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
		}
	}
	if r.IntN(5) == 0 && k.answered() && time.Now().Before(deadline) {
		s.deliver(k, r.IntN(len(s.gws)), true)
	}
	if fresh {
		s.retire(k)
	}
}

// records reads the record of every key (nil when absent).
func (s *soakRun) records(t *testing.T, st *redis.Store) map[string]*store.Record {
	t.Helper()
	recs := make(map[string]*store.Record, len(s.keys))
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
		next  = make(chan *soakKey)
	)
	for range 8 {
		wg.Go(func() {
			for k := range next {
				rec, err := st.Get(context.Background(), k.id)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				recs[k.id] = rec
				mu.Unlock()
			}
		})
	}
	for _, k := range s.keys {
		next <- k
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatalf("reading records: %v", first)
	}
	return recs
}

// resolve delivers once more every key whose record is still in flight
// after the traffic stopped (its completion could not be recorded while
// Redis was down), after its lease ran out: the claim then turns it into
// outcome_unknown (hold, store) or takes it over (release). It returns how
// many keys it resolved.
func (s *soakRun) resolve(t *testing.T, st *redis.Store) int {
	t.Helper()
	resolved := 0
	for range 3 {
		var (
			pending []*soakKey
			until   time.Time
		)
		recs := s.records(t, st)
		for _, k := range s.keys {
			if rec := recs[k.id]; rec != nil && rec.State == store.StateInFlight {
				pending = append(pending, k)
				if rec.LeaseUntil.After(until) {
					until = rec.LeaseUntil
				}
			}
		}
		if len(pending) == 0 {
			break
		}
		time.Sleep(min(max(time.Until(until)+100*time.Millisecond, 0), soakLease+time.Second))
		var wg sync.WaitGroup
		for i, k := range pending {
			wg.Go(func() { s.deliver(k, i%len(s.gws), false) })
		}
		wg.Wait()
		resolved += len(pending)
	}
	return resolved
}

// soakTrouble is what the gateways logged about one key's store calls
// failing (while Redis was down).
type soakTrouble struct {
	claimErrors  int // claim failed: the client got 503
	settleErrors int // the outcome could not be recorded; the lease runs out
	renewErrors  int
	lostClaims   int // a claim was taken over while its call ran
}

func (tr soakTrouble) seen() bool {
	return tr.claimErrors+tr.settleErrors+tr.renewErrors+tr.lostClaims > 0
}

// soakTroubles reads the gateways' JSON logs.
func soakTroubles(logs ...string) map[string]soakTrouble {
	out := map[string]soakTrouble{}
	for _, l := range logs {
		for line := range strings.SplitSeq(l, "\n") {
			if !strings.HasPrefix(line, "{") || !strings.Contains(line, `"record_id"`) {
				continue
			}
			var e struct {
				Msg     string `json:"msg"`
				KeyID   string `json:"record_id"`
				Outcome string `json:"outcome"`
			}
			if json.Unmarshal([]byte(line), &e) != nil || e.KeyID == "" {
				continue
			}
			tr := out[e.KeyID]
			switch {
			case e.Msg == "idempotency decision":
				if e.Outcome != "store_error" {
					continue
				}
				tr.claimErrors++
			case strings.HasPrefix(e.Msg, "recording the upstream outcome failed"):
				tr.settleErrors++
			case strings.HasPrefix(e.Msg, "renewing a claim failed"):
				tr.renewErrors++
			case strings.Contains(e.Msg, "taken over"), strings.Contains(e.Msg, "claim lost"):
				tr.lostClaims++
			default:
				continue
			}
			out[e.KeyID] = tr
		}
	}
	return out
}

// soakExpect is the record state a call's action leaves under a policy,
// and the status a completed record stores.
func soakExpect(onUnknown string, a soakAction) (store.State, int) {
	switch a {
	case soakOK, soakSlow:
		return store.StateCompleted, http.StatusCreated
	case soak429:
		return store.StateReleased, 0
	}
	switch onUnknown {
	case "release":
		return store.StateReleased, 0
	case "store":
		if a == soakDrop {
			// No status at all: never stored as a result, held.
			return store.StateUnknown, 0
		}
		return store.StateCompleted, http.StatusInternalServerError
	}
	return store.StateUnknown, 0
}

// soakCheck checks one key against its record, the upstream's calls and the
// gateways' logs, and returns the violations.
func soakCheck(k *soakKey, rec *store.Record, calls []soakCall, deliveries []soakDelivery, tr soakTrouble) []string {
	var v []string
	bad := func(format string, args ...any) {
		v = append(v, fmt.Sprintf("%s key %s (record %s): ", k.policy.onUnknown, k.name, k.id)+fmt.Sprintf(format, args...))
	}
	policy := k.policy.onUnknown
	// What counts against the retry budget: a 429 ("not done"), and under
	// release the unknown outcomes the policy lets go (a 500, a drop).
	counted := func(a soakAction) bool {
		return a == soak429 || policy == "release" && (a == soak500 || a == soakDrop)
	}
	acted, nCounted, dropped := 0, 0, false
	for _, c := range calls {
		if c.action.acted() {
			acted++
		}
		if counted(c.action) {
			nCounted++
		}
		dropped = dropped || c.action == soakDrop
		if c.changed {
			bad("call %d carried the changed payload: a reused key was forwarded", c.exec)
		}
		if c.keyHeader != k.name {
			bad("call %d got Idempotency-Key %q upstream", c.exec, c.keyHeader)
		}
	}

	// Executions the policy allows: after a call whose outcome the policy
	// keeps (a stored result, or a held unknown), nothing may run again.
	// Under release, a completion the gateway could not record (Redis down)
	// ends in an expired lease, which a retry may take over.
	explained := 0
	if policy == "release" {
		explained = tr.settleErrors
	}
	// The retry budget: the soakMaxExecutions-th counted execution (a 429;
	// under release also a 500 or a drop) holds the record as retries
	// exhausted. One whose recording failed, or whose claim was lost, was
	// not counted, so on a key with store trouble the budget may run out
	// that many executions later.
	slack := tr.settleErrors + tr.lostClaims
	notDone := 0
	for i, c := range calls[:max(len(calls)-1, 0)] {
		if counted(c.action) {
			if notDone++; notDone < soakMaxExecutions+slack {
				continue
			}
			bad("call %d ran after call %d used up the retry budget (%d not-done executions): %d executions",
				calls[i+1].exec, c.exec, notDone, len(calls))
			break
		}
		if st, _ := soakExpect(policy, c.action); st == store.StateReleased {
			continue
		}
		if explained > 0 {
			explained--
			continue
		}
		bad("call %d ran after call %d ended %s, which %s keeps: %d executions, %d acted",
			calls[i+1].exec, c.exec, c.action, policy, len(calls), acted)
		break
	}

	answered := 0
	for _, d := range deliveries {
		if d.err == "" && d.status != http.StatusServiceUnavailable {
			answered++
		}
	}
	// The record against the upstream's count.
	switch {
	case rec == nil:
		if len(calls) > 0 {
			bad("the upstream ran %d times but there is no record", len(calls))
		}
	case int64(len(calls)) > rec.Executions:
		bad("the upstream ran %d times, the record counts %d executions", len(calls), rec.Executions)
	case !tr.seen() && rec.Executions != int64(len(calls)):
		bad("the record counts %d executions, the upstream ran %d times", rec.Executions, len(calls))
	case !tr.seen() && rec.Attempts != int64(answered):
		bad("the record counts %d attempts, %d deliveries were answered", rec.Attempts, answered)
	}

	// The final state.
	if rec != nil {
		switch rec.State {
		case store.StateCompleted, store.StateUnknown, store.StateReleased:
		default:
			bad("ends in state %q", rec.State)
		}
	}
	switch {
	case len(calls) == 0:
		if rec != nil && (rec.State == store.StateCompleted || !tr.seen()) {
			bad("never reached the upstream but its record is %s", rec.State)
		}
	case rec != nil:
		last := calls[len(calls)-1]
		want, status := soakExpect(policy, last.action)
		// What the budget allows besides: exhausted at the budget-th
		// counted execution; on a key with store trouble, also up to slack
		// of them later.
		orExhausted := false
		if counted(last.action) && nCounted >= soakMaxExecutions {
			orExhausted = nCounted < soakMaxExecutions+slack
			if !orExhausted {
				want = store.StateExhausted
			}
		}
		// Under release, a completion the gateway could not record ends in
		// an expired lease, and the retry that takes it over counts it:
		// the budget may run out that many executions sooner.
		if policy == "release" && tr.settleErrors > 0 && nCounted+tr.settleErrors >= soakMaxExecutions {
			orExhausted = true
		}
		heldAfterTrouble := tr.seen() && policy != "release" && rec.State == store.StateUnknown
		switch {
		case rec.Class() != want && !heldAfterTrouble && !(orExhausted && rec.Class() == store.StateExhausted):
			bad("last call %d ended %s, the record is %s (reason %q), want %s", last.exec, last.action, rec.State, rec.Reason,
				strings.ReplaceAll(string(want), "_", " "))
		case rec.State == store.StateCompleted && rec.Status != status:
			bad("last call %d ended %s, the record stores status %d", last.exec, last.action, rec.Status)
		case rec.State == store.StateCompleted && last.action != soakDrop:
			var b struct{ Exec int }
			if json.Unmarshal(rec.Body, &b) != nil || b.Exec != last.exec {
				bad("the record stores the result of call %d, the last call was %d", b.Exec, last.exec)
			}
		}
		switch {
		case rec.Class() == store.StateExhausted && rec.NotDone != soakMaxExecutions:
			bad("held as retries exhausted, the record counts %d not-done executions, the budget is %d", rec.NotDone, soakMaxExecutions)
		case counted(last.action) && !tr.seen() && rec.NotDone != int64(nCounted):
			bad("the record counts %d not-done executions, the upstream answered %d times in a way that counts", rec.NotDone, nCounted)
		}
	}

	// What the clients saw.
	for i, d := range deliveries {
		switch {
		case d.err != "":
			bad("delivery %d failed: %s", i+1, d.err)
		case d.recordID != "" && d.recordID != k.id:
			bad("delivery %d: problem names record %s", i+1, d.recordID)
		case d.changed:
			if d.status != http.StatusUnprocessableEntity && d.status != http.StatusServiceUnavailable {
				bad("changed payload answered %d, want 422", d.status)
			}
		case d.replayed:
			if rec == nil || rec.State != store.StateCompleted || d.status != rec.Status || !bytes.Equal(d.body, rec.Body) {
				bad("delivery %d replayed %d %s, which is not the stored result", i+1, d.status, d.body)
			}
		case d.status == http.StatusConflict && d.problem == "outcome-unknown":
			if policy == "release" || (policy == "store" && !tr.seen() && !dropped) {
				bad("delivery %d: held as outcome unknown under %s", i+1, policy)
			}
		case d.status == http.StatusConflict && d.problem == "retries-exhausted":
			if rec == nil || rec.Class() != store.StateExhausted {
				state := store.State("absent")
				if rec != nil {
					state = rec.Class()
				}
				bad("delivery %d answered 409 retries-exhausted, the record is %s", i+1, state)
			}
		case d.status == http.StatusConflict && d.problem == "in-flight",
			d.status == http.StatusServiceUnavailable && d.problem == "store-unavailable",
			d.status == http.StatusCreated, d.status == http.StatusInternalServerError,
			d.status == http.StatusBadGateway, d.status == http.StatusTooManyRequests:
		default:
			bad("delivery %d answered %d %s", i+1, d.status, d.problem)
		}
	}
	return v
}

// soakStats is one row of the soak table.
type soakStats struct {
	keys, deliveries, executions, acted, reexecutions       int
	replays, inFlight, heldAnswers, mismatches, storeErrors int
	completed, held, exhausted, released, neverClaimed      int
	violated                                                int
}

func (a *soakStats) add(b soakStats) {
	a.keys += b.keys
	a.deliveries += b.deliveries
	a.executions += b.executions
	a.acted += b.acted
	a.reexecutions += b.reexecutions
	a.replays += b.replays
	a.inFlight += b.inFlight
	a.heldAnswers += b.heldAnswers
	a.mismatches += b.mismatches
	a.storeErrors += b.storeErrors
	a.completed += b.completed
	a.held += b.held
	a.exhausted += b.exhausted
	a.released += b.released
	a.neverClaimed += b.neverClaimed
	a.violated += b.violated
}

func soakCount(rec *store.Record, calls []soakCall, deliveries []soakDelivery) soakStats {
	s := soakStats{keys: 1, deliveries: len(deliveries), executions: len(calls), reexecutions: max(len(calls)-1, 0)}
	for _, c := range calls {
		if c.action.acted() {
			s.acted++
		}
	}
	for _, d := range deliveries {
		switch {
		case d.replayed:
			s.replays++
		case d.status == http.StatusConflict && d.problem == "in-flight":
			s.inFlight++
		case d.status == http.StatusConflict && (d.problem == "outcome-unknown" || d.problem == "retries-exhausted"):
			s.heldAnswers++
		case d.status == http.StatusUnprocessableEntity:
			s.mismatches++
		case d.status == http.StatusServiceUnavailable:
			s.storeErrors++
		}
	}
	switch {
	case rec == nil:
		s.neverClaimed++
	case rec.State == store.StateCompleted:
		s.completed++
	case rec.State == store.StateUnknown:
		s.held++
		if rec.Class() == store.StateExhausted {
			s.exhausted++
		}
	case rec.State == store.StateReleased:
		s.released++
	}
	return s
}

func soakTable(rows []string, stats map[string]*soakStats) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tkeys\tdeliveries\texecutions\tacted\tre-executions\treplays\t409 in flight\t409 held\t422\t503\tcompleted\theld\tof them exhausted\treleased\tnever claimed\tviolations\t")
	for _, name := range rows {
		s := stats[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", name,
			s.keys, s.deliveries, s.executions, s.acted, s.reexecutions,
			s.replays, s.inFlight, s.heldAnswers, s.mismatches, s.storeErrors,
			s.completed, s.held, s.exhausted, s.released, s.neverClaimed, s.violated)
	}
	tw.Flush()
	return b.String()
}

// soakKeepLogs moves a gateway's log to a file when the test fails, so that
// the harness does not print megabytes of decisions.
func soakKeepLogs(t *testing.T, gw *gateway) {
	t.Cleanup(func() { // runs before the harness stops the gateway
		if !t.Failed() {
			return
		}
		f, err := os.CreateTemp("", "idemgate-soak-*.log")
		if err != nil {
			return
		}
		gw.logs.mu.Lock()
		_, _ = gw.logs.b.WriteTo(f)
		gw.logs.mu.Unlock()
		f.Close()
		t.Logf("gateway %s log: %s", gw.url, f.Name())
	})
}

// TestSoak runs mixed traffic with random upstream faults and Redis
// restarts, then checks the invariant: no key executed more often than its
// policy allows, and every key ends in a known state, as the store's
// records, the upstream's own count and the clients' answers agree.
func TestSoak(t *testing.T) {
	duration := soakDefaultDuration
	if v := os.Getenv("IDEMGATE_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("IDEMGATE_SOAK_DURATION=%q: want a positive Go duration like 60s", v)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("IDEMGATE_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("IDEMGATE_SOAK_SEED=%q: %v", v, err)
		}
		seed = n
	}
	restarts := max(1, int(duration/(20*time.Second)))
	t.Logf("soak: %v of traffic, seed %d (IDEMGATE_SOAK_SEED=%d repeats the faults), %d Redis restart(s)", duration, seed, seed, restarts)

	began := time.Now()
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	up := newSoakUpstream(t, seed, soakSlowCall)
	run := &soakRun{
		seed: seed,
		client: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64},
		},
	}
	for range 2 {
		gw := startGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: soakRules,
			extra: withSecret("op_timeout 1s")}) // shorter than the 2s lease
		soakKeepLogs(t, gw)
		run.gws = append(run.gws, gw)
	}
	st := redis.New(srv.Client(t), "", 5*time.Second)

	setupTook := time.Since(began)
	start := time.Now()
	deadline := start.Add(duration)
	var wg sync.WaitGroup
	for w := range soakWorkers {
		wg.Go(func() { run.worker(w, deadline) })
	}
	for i := 1; i <= restarts; i++ {
		time.Sleep(time.Until(start.Add(duration * time.Duration(i) / time.Duration(restarts+1))))
		srv.Stop()
		time.Sleep(soakOutage)
		srv.Restart(t)
	}
	wg.Wait()
	trafficTook := time.Since(start)
	resolveStarted := time.Now()
	resolved := run.resolve(t, st)
	resolveTook := time.Since(resolveStarted)

	// Check every key.
	logs := make([]string, len(run.gws))
	for i, gw := range run.gws {
		logs[i] = gw.logs.String()
	}
	troubles := soakTroubles(logs...)
	recs := run.records(t, st)
	stats := map[string]*soakStats{"total": {}}
	rows := []string{}
	for _, p := range soakPolicies {
		stats[p.onUnknown] = &soakStats{}
		rows = append(rows, p.onUnknown)
	}
	rows = append(rows, "total")
	var violations []string
	known := map[string]bool{}
	troubled := soakTrouble{}
	for _, k := range run.keys {
		known[k.id] = true
		rec, calls, deliveries, tr := recs[k.id], up.callsOf(k.name), k.snapshot(), troubles[k.id]
		v := soakCheck(k, rec, calls, deliveries, tr)
		s := soakCount(rec, calls, deliveries)
		s.violated = len(v)
		stats[k.policy.onUnknown].add(s)
		stats["total"].add(s)
		violations = append(violations, v...)
		troubled.claimErrors += tr.claimErrors
		troubled.settleErrors += tr.settleErrors
		troubled.renewErrors += tr.renewErrors
		troubled.lostClaims += tr.lostClaims
	}
	err := st.ScanIDs(context.Background(), func(id string) error {
		if !known[id] {
			violations = append(violations, "record "+id+" belongs to no key the soak sent")
			stats["total"].violated++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing records: %v", err)
	}
	up.mu.Lock()
	for _, u := range up.unowned {
		violations = append(violations, "the upstream got a call without a soak payload: "+u)
		stats["total"].violated++
	}
	up.mu.Unlock()

	total := stats["total"]
	t.Logf("soak: set-up %v, traffic %v (%d deliveries, %.0f/s; two gateways, %d Redis restart(s) of %v each), resolving leases %v, checks %v",
		setupTook.Round(time.Millisecond), trafficTook.Round(time.Millisecond), total.deliveries, float64(total.deliveries)/trafficTook.Seconds(),
		restarts, soakOutage, resolveTook.Round(time.Millisecond), time.Since(resolveStarted.Add(resolveTook)).Round(time.Millisecond))
	t.Logf("soak: store trouble while Redis was down: %d claims failed (503), %d outcomes not recorded, %d renewals failed, %d claims lost; %d expired leases resolved at the end",
		troubled.claimErrors, troubled.settleErrors, troubled.renewErrors, troubled.lostClaims, resolved)
	t.Logf("soak: results (executions and acted are the upstream's own counts; completed/held/released are the final records):\n%s",
		soakTable(rows, stats))
	if len(violations) > 0 {
		shown := violations[:min(len(violations), soakShowViolations)]
		t.Errorf("soak: %d violations (seed %d); the first %d:\n%s",
			len(violations), seed, len(shown), strings.Join(shown, "\n"))
	}
	if total.keys == 0 || total.executions == 0 {
		t.Errorf("soak: no traffic reached the upstream (%d keys)", total.keys)
	}
}
