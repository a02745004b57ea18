package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
)

// The fault suite: the real binary in front of a fault-injecting upstream,
// on a real redis-server. Every test states the number of business
// executions it expects (the upstream's own count, by key) and the record's
// final state (read through the operator API), and asserts both.
//
// Client disconnects mid-call are covered by TestClientDisconnectDoesNotCancel
// in gateway_test.go.

// faultRules: every route keys on Idempotency-Key and has the shortest lease
// (1s), so lease expiry takes a second. The route name is the operation.
const faultRules = `
defaults:
  ttl: 1h
  lock_lease: 1s
routes:
  - name: ok
    match: { path: /ok/* }
    key: ["{header.Idempotency-Key}"]
    external_id: id
  - name: slow_release
    match: { path: /slow/release }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: release
  - name: slow_store
    match: { path: /slow/store }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: store
  - name: slow_long
    match: { path: /slow/long }
    key: ["{header.Idempotency-Key}"]
    lock_lease: 10s
  - name: slow
    match: { path: /slow/* }
    key: ["{header.Idempotency-Key}"]
  - name: drop_store
    match: { path: /drop/store }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: store
  - name: drop
    match: { path: /drop/* }
    key: ["{header.Idempotency-Key}"]
  - name: reset
    match: { path: /reset/* }
    key: ["{header.Idempotency-Key}"]
  - name: partial_store
    match: { path: /partial/store }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: store
  - name: partial
    match: { path: /partial/* }
    key: ["{header.Idempotency-Key}"]
  - name: validate
    match: { path: /validate/* }
    key: ["{header.Idempotency-Key}"]
  - name: fail_hold
    match: { path: /fail/hold }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: hold
  - name: fail_release
    match: { path: /fail/release }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: release
  - name: fail_store
    match: { path: /fail/store }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: store
  - name: flaky
    match: { path: /flaky/* }
    key: ["{header.Idempotency-Key}"]
`

// faultEnv is one test's Redis, upstream and gateway.
type faultEnv struct {
	redis *redistest.Server
	up    *faultUpstream
	gw    *gateway
}

type faultSetup struct {
	redisArgs []string       // extra redis-server arguments
	up        *faultUpstream // nil: a fresh, listening upstream
	proxy     string         // lines inside the reverse_proxy block
}

// faultDurable makes Redis keep its data across Stop and Restart.
var faultDurable = []string{"--appendonly", "yes", "--appendfsync", "always"}

func faultStart(t *testing.T, s faultSetup) *faultEnv {
	t.Helper()
	srv := redistest.Start(t, s.redisArgs...)
	up := s.up
	if up == nil {
		up = newFaultUpstream(t)
	}
	gw := startGateway(t, gatewayConfig{
		store:    "redis://" + srv.Addr,
		upstream: up.addr,
		rules:    faultRules,
		extra:    withSecret("op_timeout 500ms"),
		proxy:    s.proxy,
	})
	// A connection the client dialled but never used looks new to the
	// gateway, whose graceful stop then waits 5s for it: close them first.
	t.Cleanup(client.CloseIdleConnections)
	return &faultEnv{redis: srv, up: up, gw: gw}
}

// faultPost delivers one request; safe to call from any goroutine.
func faultPost(url, key, body string) (response, error) {
	return do(client, http.MethodPost, url, []byte(body), "Content-Type", "application/json", "Idempotency-Key", key)
}

// faultSend is faultPost with a transport error reported as status -1 and
// the error text as the body; safe to call from any goroutine.
func faultSend(url, key, body string) response {
	r, err := faultPost(url, key, body)
	if err != nil {
		return response{status: -1, body: []byte(err.Error())}
	}
	return r
}

// faultSendAsync sends one request in the background; the channel yields
// its answer.
func faultSendAsync(url, key, body string) <-chan response {
	answer := make(chan response, 1)
	go func() { answer <- faultSend(url, key, body) }()
	return answer
}

// faultDeliver delivers one request from the test goroutine.
func faultDeliver(t *testing.T, url, key, body string) response {
	t.Helper()
	r, err := faultPost(url, key, body)
	if err != nil {
		t.Fatalf("POST %s (key %s): %v", url, key, err)
	}
	return r
}

// faultWant is a record's expected final state.
type faultWant struct {
	state store.State
	// executions is the record's count of claims allowed to call the
	// upstream (a claim released because the request never left counts).
	executions int64
	attempts   int64  // deliveries that reached the record; 0: not checked
	status     int    // stored status; 0: not checked
	reason     string // why the outcome is unknown; "": not checked
}

// faultGetRecord reads record id through the gateway's operator API
// (GET /idempotency/records/{id} on the admin address).
func faultGetRecord(t *testing.T, gw *gateway, id string) *adminRecord {
	t.Helper()
	code, b, _ := adminCall(t, gw, http.MethodGet, "/idempotency/records/"+id, "")
	if code != http.StatusOK {
		t.Fatalf("GET record %s: %d %s", id, code, b)
	}
	var rec adminRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("GET record %s: %v: %s", id, err, b)
	}
	if rec.ID != id {
		t.Fatalf("GET record %s answered record %q", id, rec.ID)
	}
	return &rec
}

// faultCheckRecord reads record id through the operator API and compares
// it with want.
func faultCheckRecord(t *testing.T, gw *gateway, id string, want faultWant) *adminRecord {
	t.Helper()
	rec := faultGetRecord(t, gw, id)
	if rec.State != want.state {
		t.Errorf("record %s: state %s (reason %q), want %s", id, rec.State, rec.Reason, want.state)
	}
	if rec.Executions != want.executions {
		t.Errorf("record %s: executions %d, want %d", id, rec.Executions, want.executions)
	}
	if want.attempts != 0 && rec.Attempts != want.attempts {
		t.Errorf("record %s: attempts %d, want %d", id, rec.Attempts, want.attempts)
	}
	if want.status != 0 && rec.Status != want.status {
		t.Errorf("record %s: status %d, want %d", id, rec.Status, want.status)
	}
	if want.reason != "" && rec.Reason != want.reason {
		t.Errorf("record %s: reason %q, want %q", id, rec.Reason, want.reason)
	}
	return rec
}

// faultCheckExecutions compares the upstream's own count for key.
func faultCheckExecutions(t *testing.T, up *faultUpstream, key string, want int) {
	t.Helper()
	if got := up.executions(key); got != want {
		t.Errorf("business executions for %s = %d, want %d", key, got, want)
	}
}

// faultUntilUnknown retries until the gateway answers 409 "outcome unknown"
// for the key: before the dead claim's lease runs out it answers 409 "in
// flight", which is the only other answer allowed. Bounded to 10 s.
func faultUntilUnknown(t *testing.T, url, key, body, id string) response {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := faultDeliver(t, url, key, body)
		if isProblem(t, r, http.StatusConflict, "outcome-unknown", id) {
			return r
		}
		if !isProblem(t, r, http.StatusConflict, "in-flight", "") {
			t.Fatalf("while the lease runs out: %d %s, want 409 in flight or outcome unknown", r.status, r.body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still in flight after 10s: %s", r.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFaultDoubleDelivery: a delivery repeated after the first finished,
// and one repeated while the first is still running.
//
// Expected: 1 business execution per key; record completed (201, external
// id D-9021), executions 1, attempts = deliveries.
func TestFaultDoubleDelivery(t *testing.T) {
	t.Parallel()
	const wantExecutions = 1
	env := faultStart(t, faultSetup{})
	body := `{"title":"Acme","amount":4200}`

	t.Run("after the first finished", func(t *testing.T) {
		key := "double-sequential"
		first := faultDeliver(t, env.gw.url+"/ok/deals", key, body)
		second := faultDeliver(t, env.gw.url+"/ok/deals", key, body)
		if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first delivery: %d replayed=%q, want a fresh 201", first.status, first.header.Get("Idempotent-Replayed"))
		}
		if second.status != http.StatusCreated || second.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, second.body) {
			t.Errorf("second delivery: %d replayed=%q %s, want a replay of %s", second.status, second.header.Get("Idempotent-Replayed"), second.body, first.body)
		}
		faultCheckExecutions(t, env.up, key, wantExecutions)
		rec := faultCheckRecord(t, env.gw, recordID("ok", "", key), faultWant{state: store.StateCompleted, executions: 1, attempts: 2, status: 201})
		if rec.ExternalID != "D-9021" {
			t.Errorf("external id %q, want D-9021", rec.ExternalID)
		}
	})

	t.Run("while the first runs", func(t *testing.T) {
		key := "double-overlapping"
		open := env.up.gate(key)
		defer open()
		first := faultSendAsync(env.gw.url+"/slow/deals", key, body)
		waitFor(t, func() bool { return env.up.executions(key) == 1 })
		second := faultDeliver(t, env.gw.url+"/slow/deals", key, body)
		if !isProblem(t, second, http.StatusConflict, "in-flight", "") || second.header.Get("Retry-After") == "" {
			t.Errorf("second delivery while the first runs: %d %s, want 409 in flight with Retry-After", second.status, second.body)
		}
		open()
		f := <-first
		if f.status != http.StatusCreated {
			t.Fatalf("first delivery: %d %s", f.status, f.body)
		}
		third := faultDeliver(t, env.gw.url+"/slow/deals", key, body)
		if third.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(third.body, f.body) {
			t.Errorf("third delivery: %d %s, want a replay", third.status, third.body)
		}
		faultCheckExecutions(t, env.up, key, wantExecutions)
		faultCheckRecord(t, env.gw, recordID("slow", "", key), faultWant{state: store.StateCompleted, executions: 1, attempts: 3, status: 201})
	})
}

// TestFaultParallelDeliveries: 50 deliveries of one key at the same time.
// The upstream holds the one call it gets until the 49 others have been
// answered, so the race is real: 1 × 201 and 49 × 409 "in flight".
//
// Expected: 1 business execution; record completed (201), executions 1,
// attempts 50 (51 after one more retry, which replays).
func TestFaultParallelDeliveries(t *testing.T) {
	t.Parallel()
	const (
		n              = 50
		wantExecutions = 1
		key            = "parallel-50"
	)
	env := faultStart(t, faultSetup{})
	body := `{"title":"Acme","amount":4200}`
	open := env.up.gate(key)
	defer open()

	results := make(chan response, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results <- faultSend(env.gw.url+"/slow/deals", key, body)
		}()
	}
	close(start)
	var got []response
	for len(got) < n-1 {
		select {
		case r := <-results:
			got = append(got, r)
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d of %d deliveries answered while the first was held", len(got), n-1)
		}
	}
	open()
	wg.Wait()
	close(results)
	for r := range results {
		got = append(got, r)
	}
	created, conflicts := 0, 0
	var createdBody []byte
	for _, r := range got {
		switch {
		case r.status == http.StatusCreated:
			created++
			createdBody = r.body
		case isProblem(t, r, http.StatusConflict, "in-flight", ""):
			conflicts++
		default:
			t.Errorf("unexpected answer %d %s", r.status, r.body)
		}
	}
	if created != 1 || conflicts != n-1 {
		t.Errorf("%d × 201 and %d × 409, want 1 and %d", created, conflicts, n-1)
	}
	if r := faultDeliver(t, env.gw.url+"/slow/deals", key, body); r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, createdBody) {
		t.Errorf("retry after the race: %d %s, want a replay of %s", r.status, r.body, createdBody)
	}
	faultCheckExecutions(t, env.up, key, wantExecutions)
	faultCheckRecord(t, env.gw, recordID("slow", "", key), faultWant{state: store.StateCompleted, executions: 1, attempts: n + 1, status: 201})
}

// TestFaultUpstreamActsThenDrops: the upstream performs the side effect and
// then breaks the connection: it closes it (FIN) or resets it (RST) without
// an answer, or sends 201 and part of the body and then breaks off. The
// request was sent: the outcome is unknown and the default
// on_unknown_outcome (hold) keeps it for an operator.
//
// Expected: 1 business execution; the retry gets 409 "outcome unknown"
// naming the record; record outcome_unknown, executions 1, attempts 2,
// reason upstream_error (no answer: the client got 502) or
// response_aborted (cut short: the client got 201 and a broken body).
func TestFaultUpstreamActsThenDrops(t *testing.T) {
	t.Parallel()
	const wantExecutions = 1
	env := faultStart(t, faultSetup{})
	for _, tc := range []struct{ route, reason string }{
		{"drop", "upstream_error"},
		{"reset", "upstream_error"},
		{"partial", "response_aborted"},
	} {
		t.Run(tc.route, func(t *testing.T) {
			key := "acts-then-" + tc.route
			id := recordID(tc.route, "", key)
			url := env.gw.url + "/" + tc.route + "/deals"
			first, err := faultPost(url, key, `{"amount":1}`)
			if tc.route == "partial" {
				if err == nil {
					t.Errorf("a cut-short response read as complete: %d %s", first.status, first.body)
				}
			} else if err != nil || first.status != http.StatusBadGateway {
				t.Errorf("first delivery: %d %s %v, want 502", first.status, first.body, err)
			}
			retry := faultDeliver(t, url, key, `{"amount":1}`)
			if !isProblem(t, retry, http.StatusConflict, "outcome-unknown", id) {
				t.Errorf("retry: %d %s, want 409 outcome unknown for record %s", retry.status, retry.body, id)
			}
			faultCheckExecutions(t, env.up, key, wantExecutions)
			faultCheckRecord(t, env.gw, id, faultWant{state: store.StateUnknown, executions: 1, attempts: 2, reason: tc.reason})
		})
	}
}

// TestFaultUpstreamRefusesThenReturns: the upstream refuses connections,
// then comes back. A refused dial provably never sent the request: the
// claim is released and the next retry executes.
//
// Expected: 1 business execution in total (the refused attempt did
// nothing); record completed (201), executions 2 (the released claim and
// the one that ran), attempts 3.
func TestFaultUpstreamRefusesThenReturns(t *testing.T) {
	t.Parallel()
	const (
		wantExecutions = 1
		key            = "refused-then-back"
	)
	up := newFaultUpstreamDown(t)
	env := faultStart(t, faultSetup{up: up})
	id := recordID("ok", "", key)
	url := env.gw.url + "/ok/deals"

	first := faultDeliver(t, url, key, `{"amount":1}`)
	if first.status != http.StatusBadGateway {
		t.Errorf("upstream down: %d %s, want 502", first.status, first.body)
	}
	faultCheckExecutions(t, up, key, 0)
	faultCheckRecord(t, env.gw, id, faultWant{state: store.StateReleased, executions: 1, attempts: 1})

	up.listen(t)
	second := faultDeliver(t, url, key, `{"amount":1}`)
	if second.status != http.StatusCreated || second.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("upstream back: %d replayed=%q %s, want a fresh 201", second.status, second.header.Get("Idempotent-Replayed"), second.body)
	}
	third := faultDeliver(t, url, key, `{"amount":1}`)
	if third.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(third.body, second.body) {
		t.Errorf("third delivery: %d %s, want a replay", third.status, third.body)
	}
	faultCheckExecutions(t, up, key, wantExecutions)
	faultCheckRecord(t, env.gw, id, faultWant{state: store.StateCompleted, executions: 2, attempts: 3, status: 201})
}

// TestFaultNeverSentVersusSentNoAnswer: both failures reach the client as
// reverse_proxy's 502, but the gateway tells them apart. A refused dial
// (reverse_proxy's DialError) never sent the request → released, and the
// retry executes. A reset after the request was written → sent, no answer
// → held. The upstream_executions metric names the two results.
//
// Expected: never-sent key (route ok): 1 business execution, by the retry;
// record completed (201), executions 2, attempts 2. Sent-no-answer key
// (route reset): 1 business execution; the retry gets 409; record
// outcome_unknown (upstream_error), executions 1, attempts 2.
func TestFaultNeverSentVersusSentNoAnswer(t *testing.T) {
	t.Parallel()
	up := newFaultUpstreamDown(t)
	env := faultStart(t, faultSetup{up: up})
	body := `{"amount":1}`
	neverURL, sentURL := env.gw.url+"/ok/deals", env.gw.url+"/reset/deals"
	neverID, sentID := recordID("ok", "", "never-sent"), recordID("reset", "", "sent-no-answer")

	// Never sent: nothing listens on the upstream's port.
	neverSent := faultDeliver(t, neverURL, "never-sent", body)
	up.listen(t)
	// Sent, no answer: the upstream reads the request, acts, then resets.
	sentNoAnswer := faultDeliver(t, sentURL, "sent-no-answer", body)
	if neverSent.status != http.StatusBadGateway || sentNoAnswer.status != http.StatusBadGateway {
		t.Errorf("statuses %d and %d, want 502 for both", neverSent.status, sentNoAnswer.status)
	}
	faultCheckExecutions(t, up, "never-sent", 0)
	faultCheckExecutions(t, up, "sent-no-answer", 1)
	faultCheckRecord(t, env.gw, neverID, faultWant{state: store.StateReleased, executions: 1, attempts: 1})
	faultCheckRecord(t, env.gw, sentID, faultWant{state: store.StateUnknown, executions: 1, attempts: 1, reason: "upstream_error"})

	metrics := metricsText(t, env.gw)
	for _, line := range []string{
		`idemgate_upstream_executions_total{result="not_sent",route="ok"} 1`,
		`idemgate_upstream_executions_total{result="held",route="reset"} 1`,
	} {
		if !strings.Contains(metrics, line) {
			t.Errorf("metrics lack %s", line)
		}
	}

	retry := faultDeliver(t, neverURL, "never-sent", body)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("retry of the never-sent request: %d %s, want a fresh 201", retry.status, retry.body)
	}
	retry = faultDeliver(t, sentURL, "sent-no-answer", body)
	if !isProblem(t, retry, http.StatusConflict, "outcome-unknown", sentID) {
		t.Errorf("retry of the sent request: %d %s, want 409 outcome unknown", retry.status, retry.body)
	}
	faultCheckExecutions(t, up, "never-sent", 1)
	faultCheckExecutions(t, up, "sent-no-answer", 1)
	faultCheckRecord(t, env.gw, neverID, faultWant{state: store.StateCompleted, executions: 2, attempts: 2, status: 201})
	faultCheckRecord(t, env.gw, sentID, faultWant{state: store.StateUnknown, executions: 1, attempts: 2, reason: "upstream_error"})
}

// TestFaultBadFieldStored: the upstream rejects a bad field with 400. A
// 4xx outside retry_statuses is a result: stored and replayed; the same
// key with a corrected payload is a different request (422), nothing is
// forwarded.
//
// Expected: 1 business execution; record completed (400), executions 1,
// attempts 3.
func TestFaultBadFieldStored(t *testing.T) {
	t.Parallel()
	const (
		wantExecutions = 1
		key            = "bad-amount"
	)
	env := faultStart(t, faultSetup{})
	url := env.gw.url + "/validate/deals"
	first := faultDeliver(t, url, key, `{"amount":-5}`)
	if first.status != http.StatusBadRequest || !strings.Contains(string(first.body), "amount must be a positive number") {
		t.Fatalf("first delivery: %d %s, want the upstream's 400", first.status, first.body)
	}
	retry := faultDeliver(t, url, key, `{"amount":-5}`)
	if retry.status != http.StatusBadRequest || retry.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(retry.body, first.body) {
		t.Errorf("retry: %d replayed=%q %s, want a replay of the 400", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
	}
	fixed := faultDeliver(t, url, key, `{"amount":5}`)
	if !isProblem(t, fixed, http.StatusUnprocessableEntity, "key-reused", recordID("validate", "", key)) {
		t.Errorf("corrected payload under the same key: %d %s, want 422", fixed.status, fixed.body)
	}
	faultCheckExecutions(t, env.up, key, wantExecutions)
	faultCheckRecord(t, env.gw, recordID("validate", "", key), faultWant{state: store.StateCompleted, executions: 1, attempts: 3, status: 400})
}

// TestFaultUpstream500: the upstream answers 500, under each
// on_unknown_outcome. Each case delivers the key twice.
func TestFaultUpstream500(t *testing.T) {
	t.Parallel()
	env := faultStart(t, faultSetup{})
	cases := []struct {
		policy string
		// wantExecutions is the upstream's count after two deliveries.
		wantExecutions int
		want           faultWant
		retry          func(t *testing.T, first, retry response, id string)
	}{
		{
			// hold: 1 business execution; the retry gets 409 "outcome
			// unknown"; record outcome_unknown (upstream_5xx), executions 1.
			policy:         "hold",
			wantExecutions: 1,
			want:           faultWant{state: store.StateUnknown, executions: 1, attempts: 2, reason: "upstream_5xx"},
			retry: func(t *testing.T, first, retry response, id string) {
				if !isProblem(t, retry, http.StatusConflict, "outcome-unknown", id) {
					t.Errorf("retry: %d %s, want 409 outcome unknown", retry.status, retry.body)
				}
			},
		},
		{
			// release: the retry executes again: 2 business executions;
			// record released (the second 500 released it too), executions 2.
			policy:         "release",
			wantExecutions: 2,
			want:           faultWant{state: store.StateReleased, executions: 2, attempts: 2},
			retry: func(t *testing.T, first, retry response, id string) {
				if retry.status != http.StatusInternalServerError || retry.header.Get("Idempotent-Replayed") != "" || !strings.Contains(string(retry.body), `"call":2`) {
					t.Errorf("retry: %d replayed=%q %s, want the upstream's second 500", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
				}
			},
		},
		{
			// store: the 500 is a result: 1 business execution, the retry
			// replays it; record completed (500), executions 1.
			policy:         "store",
			wantExecutions: 1,
			want:           faultWant{state: store.StateCompleted, executions: 1, attempts: 2, status: 500},
			retry: func(t *testing.T, first, retry response, id string) {
				if retry.status != http.StatusInternalServerError || retry.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(retry.body, first.body) {
					t.Errorf("retry: %d replayed=%q %s, want a replay of %s", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body, first.body)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.policy, func(t *testing.T) {
			key := "fail-500-" + tc.policy
			route := "fail_" + tc.policy
			id := recordID(route, "", key)
			url := env.gw.url + "/fail/" + tc.policy
			first := faultDeliver(t, url, key, `{"amount":1}`)
			if first.status != http.StatusInternalServerError || !strings.Contains(string(first.body), "database unavailable") {
				t.Errorf("first delivery: %d %s, want the upstream's 500", first.status, first.body)
			}
			retry := faultDeliver(t, url, key, `{"amount":1}`)
			tc.retry(t, first, retry, id)
			faultCheckExecutions(t, env.up, key, tc.wantExecutions)
			faultCheckRecord(t, env.gw, id, tc.want)
		})
	}
}

// TestFaultResponseTimeout: the upstream takes the request and does not
// answer within reverse_proxy's response_header_timeout (1s). The request
// was sent, so the outcome is unknown: held.
//
// Expected: 1 business execution; the client gets 504, the retry 409
// "outcome unknown"; record outcome_unknown (upstream_error), executions 1,
// attempts 2.
func TestFaultResponseTimeout(t *testing.T) {
	const (
		wantExecutions = 1
		key            = "response-timeout"
	)
	env := faultStart(t, faultSetup{proxy: "transport http {\n\t\t\tresponse_header_timeout 1s\n\t\t}"})
	open := env.up.gate(key)
	defer open()
	id := recordID("slow", "", key)
	url := env.gw.url + "/slow/deals"

	first := faultDeliver(t, url, key, `{"amount":1}`)
	if first.status != http.StatusGatewayTimeout {
		t.Errorf("first delivery: %d %s, want 504", first.status, first.body)
	}
	retry := faultDeliver(t, url, key, `{"amount":1}`)
	if !isProblem(t, retry, http.StatusConflict, "outcome-unknown", id) {
		t.Errorf("retry: %d %s, want 409 outcome unknown", retry.status, retry.body)
	}
	open()
	faultCheckExecutions(t, env.up, key, wantExecutions)
	faultCheckRecord(t, env.gw, id, faultWant{state: store.StateUnknown, executions: 1, attempts: 2, reason: "upstream_error"})
}

// TestFaultGatewayKilledMidCall: the gateway dies (SIGKILL) while the
// upstream is acting for three keys, one per on_unknown_outcome, and is
// restarted. Nobody renews the claims and their 1s leases run out; what the
// next retry finds depends on the route's policy.
//
// Expected:
//   - hold: 1 business execution; retries get 409 "in flight" until the
//     lease runs out, then 409 "outcome unknown"; record outcome_unknown
//     (lease_expired), executions 1.
//   - store: the same as hold (a dead call left no result to store).
//   - release: the first retry after the lease ran out takes the claim
//     over and executes again: 2 business executions; record completed
//     (201), executions 2.
func TestFaultGatewayKilledMidCall(t *testing.T) {
	t.Parallel()
	env := faultStart(t, faultSetup{redisArgs: faultDurable})
	body := `{"amount":1}`
	cases := []struct {
		policy, route, path string
		wantExecutions      int
		want                faultWant
	}{
		{"hold", "slow", "/slow/deals", 1, faultWant{state: store.StateUnknown, executions: 1, reason: "lease_expired"}},
		{"store", "slow_store", "/slow/store", 1, faultWant{state: store.StateUnknown, executions: 1, reason: "lease_expired"}},
		{"release", "slow_release", "/slow/release", 2, faultWant{state: store.StateCompleted, executions: 2, status: 201}},
	}
	failed := make(chan error, len(cases))
	for _, tc := range cases {
		key := "gateway-killed-" + tc.policy
		defer env.up.gate(key)()
		go func() {
			r, err := faultPost(env.gw.url+tc.path, key, body)
			if err == nil {
				err = fmt.Errorf("got %d %s from a killed gateway", r.status, r.body)
			}
			failed <- err
		}()
		waitFor(t, func() bool { return env.up.executions(key) == 1 })
	}
	env.gw.kill()
	for range cases {
		if err := <-failed; err == nil {
			t.Error("a client got an answer from a killed gateway")
		}
	}
	env.gw.restart()

	for _, tc := range cases {
		t.Run(tc.policy, func(t *testing.T) {
			key := "gateway-killed-" + tc.policy
			id := recordID(tc.route, "", key)
			url := env.gw.url + tc.path
			if tc.policy == "release" {
				env.up.gate(key)() // the takeover's call answers at once
				var r response
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					r = faultDeliver(t, url, key, body)
					if !isProblem(t, r, http.StatusConflict, "in-flight", "") || time.Now().After(deadline) {
						break
					}
				}
				if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" || !strings.Contains(string(r.body), `"call":2`) {
					t.Errorf("retry after the lease ran out: %d %s, want the upstream's second 201", r.status, r.body)
				}
			} else {
				faultUntilUnknown(t, url, key, body, id)
			}
			faultCheckExecutions(t, env.up, key, tc.wantExecutions)
			rec := faultCheckRecord(t, env.gw, id, tc.want)
			if rec.Attempts < 2 {
				t.Errorf("attempts %d, want at least 2", rec.Attempts)
			}
		})
	}
}

// TestFaultRedisRestartMidTraffic: redis-server is stopped and restarted
// (append-only file, so records survive) while deliveries keep coming.
// During the outage every guarded request gets 503 and is not forwarded.
//
// Expected, per key: at most 1 business execution. Keys completed before
// the outage: 1 execution, record completed, replayed after the restart
// with the same body. Every other key ends completed (1 execution) or,
// when the outage cut between its upstream call and its completion,
// outcome_unknown (at most 1 execution, retry 409).
func TestFaultRedisRestartMidTraffic(t *testing.T) {
	env := faultStart(t, faultSetup{redisArgs: faultDurable})
	url := env.gw.url + "/ok/deals"
	body := `{"amount":1}`
	before := make([]string, 10)
	during := make([]string, 10)
	firstBodies := map[string][]byte{}
	for i := range before {
		before[i] = fmt.Sprintf("before-%d", i)
		during[i] = fmt.Sprintf("during-%d", i)
		r := faultDeliver(t, url, before[i], body)
		if r.status != http.StatusCreated {
			t.Fatalf("%s with Redis up: %d %s", before[i], r.status, r.body)
		}
		firstBodies[before[i]] = r.body
	}
	keys := append(append([]string(nil), before...), during...)

	// Background traffic: two workers cycle over all keys until stopped.
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
	)
	outage503 := func() int { mu.Lock(); defer mu.Unlock(); return statuses[http.StatusServiceUnavailable] }
	stop := background(2, 5000, 5*time.Millisecond, func(w, i int) {
		r, err := faultPost(url, keys[(i*2+w)%len(keys)], body)
		mu.Lock()
		if err != nil {
			statuses[-1]++
		} else {
			statuses[r.status]++
		}
		mu.Unlock()
	})

	time.Sleep(200 * time.Millisecond)
	env.redis.Stop()
	callsAtStop := env.up.totalExecutions()
	r := faultDeliver(t, url, "outage-probe", body)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("during the outage: %d %s, want 503 with Retry-After", r.status, r.body)
	}
	waitFor(t, func() bool { return outage503() >= 10 })
	// At most the calls that were already running when Redis went away
	// may still reach the upstream; none is forwarded after that.
	if got := env.up.totalExecutions(); got > callsAtStop+2 {
		t.Errorf("%d upstream calls during the outage (started with %d)", got, callsAtStop)
	}
	faultCheckExecutions(t, env.up, "outage-probe", 0)
	env.redis.Restart(t)
	waitFor(t, func() bool {
		r, err := faultPost(url, "after-restart", body)
		return err == nil && r.status == http.StatusCreated
	})
	time.Sleep(300 * time.Millisecond)
	stop()

	mu.Lock()
	for status, n := range statuses {
		switch status {
		case http.StatusCreated, http.StatusConflict, http.StatusServiceUnavailable:
		default:
			t.Errorf("%d background deliveries answered %d, want only 201, 409 or 503", n, status)
		}
	}
	t.Logf("background deliveries by status: %v", statuses)
	mu.Unlock()

	for _, key := range keys {
		id := recordID("ok", "", key)
		final := faultDeliver(t, url, key, body)
		if isProblem(t, final, http.StatusConflict, "in-flight", "") {
			final = faultUntilUnknown(t, url, key, body, id)
		}
		n := env.up.executions(key)
		if n > 1 {
			t.Errorf("%s executed %d times, want at most once", key, n)
		}
		rec := faultGetRecord(t, env.gw, id)
		switch rec.State {
		case store.StateCompleted:
			// Completed: exactly 1 business execution, replayed.
			if n != 1 || rec.Executions != 1 || final.status != http.StatusCreated || final.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("%s: completed with %d executions (record %d), final delivery %d replayed=%q", key, n, rec.Executions, final.status, final.header.Get("Idempotent-Replayed"))
			}
		case store.StateUnknown:
			// Held: the outage cut between claim and completion.
			if !isProblem(t, final, http.StatusConflict, "outcome-unknown", id) {
				t.Errorf("%s: held, final delivery %d %s", key, final.status, final.body)
			}
			t.Logf("%s: outcome unknown (%s) after %d business executions", key, rec.Reason, n)
		default:
			t.Errorf("%s: final state %s, want completed or outcome_unknown", key, rec.State)
		}
	}
	for _, key := range before {
		if r := faultDeliver(t, url, key, body); !bytes.Equal(r.body, firstBodies[key]) {
			t.Errorf("%s: after the restart %d %s, want the replay of %s", key, r.status, r.body, firstBodies[key])
		}
		faultCheckExecutions(t, env.up, key, 1)
		faultCheckRecord(t, env.gw, recordID("ok", "", key), faultWant{state: store.StateCompleted, executions: 1, status: 201})
	}
}

// TestFaultRedisFailsAtCompletion: the upstream has answered, and the
// store fails just as the gateway records the result: Redis stalls
// (SIGSTOP) for longer than op_timeout, restarts with its data, or
// restarts empty (a failover to a replica that never saw the claim). The
// gateway keeps storing the known result in the background, under the same
// token, until the claim's lease (10s) would have run out, and writes the
// record anew when the claim itself was lost.
//
// Expected: the client gets the upstream's 201; 1 business execution; the
// record ends completed with the upstream's result, and the retry replays
// it.
func TestFaultRedisFailsAtCompletion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fail  func(t *testing.T, env *faultEnv) (heal func())
		lost  bool // the claim is gone from Redis
		extra []string
	}{
		{"stall", func(t *testing.T, env *faultEnv) func() {
			pid := faultRedisPID(t, env.redis)
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			resume := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
			t.Cleanup(resume)
			return resume
		}, false, nil},
		{"restart", func(t *testing.T, env *faultEnv) func() {
			env.redis.Stop()
			return func() { env.redis.Restart(t) }
		}, false, faultDurable},
		{"claim lost", func(t *testing.T, env *faultEnv) func() {
			env.redis.Stop()
			return func() { env.redis.Restart(t) }
		}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const key = "completion-fails"
			env := faultStart(t, faultSetup{redisArgs: tc.extra})
			open := env.up.gate(key)
			defer open()
			id := recordID("slow_long", "", key)
			url := env.gw.url + "/slow/long"
			body := `{"amount":1}`

			first := faultSendAsync(url, key, body)
			waitFor(t, func() bool { return env.up.executions(key) == 1 })
			heal := tc.fail(t, env)
			open()
			f := <-first
			if f.status != http.StatusCreated || f.header.Get("Idempotent-Replayed") != "" || !strings.Contains(string(f.body), `"call":1`) {
				t.Errorf("client during the failed completion: %d %s, want the upstream's 201", f.status, f.body)
			}
			// The client may have its answer before the gateway tried to record it.
			waitFor(t, func() bool { return strings.Contains(env.gw.logs.String(), "recording the upstream outcome failed") })
			time.Sleep(700 * time.Millisecond) // longer than op_timeout: the first try has failed
			heal()
			// The background tries land within a second or two of recovery;
			// the checks below say what the record became.
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if adminRecordState(env.gw, id) == store.StateCompleted {
					break
				}
			}

			r := faultDeliver(t, url, key, body)
			if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(r.body), `"call":1`) {
				t.Errorf("retry: %d %s, want the stored 201 replayed", r.status, r.body)
			}
			faultCheckExecutions(t, env.up, key, 1)
			want := faultWant{state: store.StateCompleted, executions: 1, status: http.StatusCreated}
			if tc.lost {
				want.attempts = 2 // the rewritten record, then the retry
			}
			faultCheckRecord(t, env.gw, id, want)
		})
	}
}

// TestFaultRedisOutOfMemoryOutlastsLease: the upstream has answered, and
// Redis has reached its maxmemory (noeviction): it refuses the result,
// and every renewal, for three times the claim's lease (1s). The gateway
// keeps the refused result (it has no room: not a failure to give up on
// when the lease runs out) and writes it once Redis has memory again.
//
// Expected: the client gets the upstream's 201; the retry after Redis has
// memory again replays it; 1 business execution; the record ends
// completed.
func TestFaultRedisOutOfMemoryOutlastsLease(t *testing.T) {
	t.Parallel()
	const key, lease = "no-memory", time.Second
	env := faultStart(t, faultSetup{})
	open := env.up.gate(key)
	defer open()
	id := recordID("slow", "", key)
	url := env.gw.url + "/slow/1"
	body := `{"amount":1}`

	first := faultSendAsync(url, key, body)
	waitFor(t, func() bool { return env.up.executions(key) == 1 })
	ctx := context.Background()
	admin := env.redis.Client(t)
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	open()
	f := <-first
	if f.status != http.StatusCreated || f.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("client while Redis has no memory: %d %s, want the upstream's 201", f.status, f.body)
	}
	waitFor(t, func() bool { return strings.Contains(env.gw.logs.String(), "recording the upstream outcome failed") })
	time.Sleep(3 * lease) // Redis stays at its maxmemory for three leases
	gaveUp := lastLine(env.gw.logs.String(), "gave up recording")
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}

	r := faultDeliver(t, url, key, body)
	t.Logf("after Redis was at its maxmemory for %v (lock_lease %v): retry %d replayed=%q; kept: %q; given up: %q", 3*lease, lease,
		r.status, r.header.Get("Idempotent-Replayed"), lastLine(env.gw.logs.String(), "keeps it"), gaveUp)
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, f.body) {
		t.Errorf("retry: %d %s, want the client's 201 replayed", r.status, r.body)
	}
	faultCheckExecutions(t, env.up, key, 1)
	faultCheckRecord(t, env.gw, id, faultWant{state: store.StateCompleted, executions: 1, status: http.StatusCreated})
}

// adminRecordState is the record's state as the operator API shows it, ""
// when it cannot be read (absent, or the store is down).
func adminRecordState(gw *gateway, id string) store.State {
	resp, err := client.Get(gw.admin + "/idempotency/records/" + id)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var rec adminRecord
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&rec) != nil {
		return ""
	}
	return rec.State
}

// TestFaultCutOffNeverStored: under on_unknown_outcome: store, a response
// that broke off (Content-Length 1000, a few bytes, then the connection
// drops) or never had a status (the connection closed before any answer)
// is held as outcome unknown, never stored and replayed as if complete.
//
// Expected: 1 business execution each; record outcome_unknown; the retry
// gets 409 outcome unknown.
func TestFaultCutOffNeverStored(t *testing.T) {
	t.Parallel()
	env := faultStart(t, faultSetup{})
	for _, tc := range []struct{ route, path, reason string }{
		{"partial_store", "/partial/store", "response_aborted"},
		{"drop_store", "/drop/store", "upstream_error"},
	} {
		t.Run(tc.route, func(t *testing.T) {
			key := "cut-off-" + tc.route
			id := recordID(tc.route, "", key)
			url := env.gw.url + tc.path
			_, _ = faultPost(url, key, `{"amount":1}`)
			retry := faultDeliver(t, url, key, `{"amount":1}`)
			if !isProblem(t, retry, http.StatusConflict, "outcome-unknown", id) {
				t.Errorf("retry: %d %s, want 409 outcome unknown for record %s", retry.status, retry.body, id)
			}
			faultCheckExecutions(t, env.up, key, 1)
			faultCheckRecord(t, env.gw, id, faultWant{state: store.StateUnknown, executions: 1, attempts: 2, reason: tc.reason})
		})
	}
}

// TestFaultSlowCallKeepsLease: an upstream call that runs for several
// leases keeps its claim (the gateway renews it while the call is alive),
// so retries meanwhile get 409 "in flight" and never take it over.
//
// Expected: 1 business execution; record completed (201), executions 1.
func TestFaultSlowCallKeepsLease(t *testing.T) {
	const (
		wantExecutions = 1
		key            = "slow-call"
	)
	env := faultStart(t, faultSetup{})
	open := env.up.gate(key)
	defer open()
	id := recordID("slow", "", key)
	url := env.gw.url + "/slow/deals"
	body := `{"amount":1}`

	first := faultSendAsync(url, key, body)
	waitFor(t, func() bool { return env.up.executions(key) == 1 })
	// Retry for three leases (1s each) while the call runs.
	retries := 0
	for until := time.Now().Add(3 * time.Second); time.Now().Before(until); time.Sleep(200 * time.Millisecond) {
		r := faultDeliver(t, url, key, body)
		if !isProblem(t, r, http.StatusConflict, "in-flight", "") {
			t.Fatalf("retry %d while the call runs: %d %s, want 409 in flight", retries+1, r.status, r.body)
		}
		retries++
	}
	open()
	if f := <-first; f.status != http.StatusCreated {
		t.Errorf("first delivery: %d %s, want 201", f.status, f.body)
	}
	faultCheckExecutions(t, env.up, key, wantExecutions)
	faultCheckRecord(t, env.gw, id, faultWant{state: store.StateCompleted, executions: 1, attempts: int64(1 + retries), status: 201})
}

// TestFaultRedisHangs: redis-server stops answering (SIGSTOP) without
// closing its connections. Every store call has a deadline, so guarded
// requests get 503 instead of hanging, and nothing is forwarded.
//
// Expected: 0 business executions during the hang, at most 1 in total.
// After Redis resumes (SIGCONT), the claim scripts that the 503'd requests
// left queued in Redis run after the gateway gave up on them. Each claim
// carries the Redis time after which nobody waits for it, so the scripts
// refuse to claim and change nothing: the key is not held by a claim
// nobody owns, and the retry executes. Expected: 0 executions during the
// hang, then exactly 1 business execution; record completed (201), with 1
// execution.
func TestFaultRedisHangs(t *testing.T) {
	const key = "redis-hangs"
	env := faultStart(t, faultSetup{})
	id := recordID("ok", "", key)
	url := env.gw.url + "/ok/deals"
	body := `{"amount":1}`
	if r := faultDeliver(t, url, "warm-up", body); r.status != http.StatusCreated {
		t.Fatalf("with Redis up: %d %s", r.status, r.body)
	}
	pid := faultRedisPID(t, env.redis)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	// The shared client gives up after 30s: a hung request fails the test.
	for range 3 {
		r := faultDeliver(t, url, key, body)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("with Redis hung: %d %s, want 503 with Retry-After", r.status, r.body)
		}
	}
	faultCheckExecutions(t, env.up, key, 0)
	resume()

	var final response
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		final = faultDeliver(t, url, key, body)
		if !isProblem(t, final, http.StatusConflict, "in-flight", "") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still in flight 10s after Redis resumed: %s", final.body)
		}
	}
	if final.status != http.StatusCreated {
		t.Fatalf("after Redis resumed: %d %s, want the retry to execute (201)", final.status, final.body)
	}
	faultCheckExecutions(t, env.up, key, 1)
	faultCheckRecord(t, env.gw, id, faultWant{state: store.StateCompleted, executions: 1, status: 201})
}

// faultRedisPID asks Redis for its process id.
func faultRedisPID(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Client(t).Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatal("INFO server has no process_id")
	return 0
}

// faultHeld delivers key to /flaky/deals, whose first call answers 500, and
// checks that the record is held: 1 business execution, 409 on retry.
func faultHeld(t *testing.T, env *faultEnv, key string) (id string) {
	t.Helper()
	id = recordID("flaky", "", key)
	url := env.gw.url + "/flaky/deals"
	if r := faultDeliver(t, url, key, `{"amount":1}`); r.status != http.StatusInternalServerError {
		t.Fatalf("first delivery: %d %s, want the upstream's 500", r.status, r.body)
	}
	if r := faultDeliver(t, url, key, `{"amount":1}`); !isProblem(t, r, http.StatusConflict, "outcome-unknown", id) {
		t.Fatalf("retry: %d %s, want 409 outcome unknown", r.status, r.body)
	}
	faultCheckExecutions(t, env.up, key, 1)
	faultCheckRecord(t, env.gw, id, faultWant{state: store.StateUnknown, executions: 1, attempts: 2, reason: "upstream_5xx"})
	return id
}

// TestFaultOperatorReleaseThenRetry: an operator who knows the held call
// did nothing releases the record through the admin API, while 10 clients
// keep retrying. Exactly one retry executes once more; the others get 409
// (held, or in flight) before and replays after.
//
// Expected: 2 business executions (the 500, then one 201); record completed
// (201), executions 2.
func TestFaultOperatorReleaseThenRetry(t *testing.T) {
	t.Parallel()
	const (
		wantExecutions = 2
		key            = "operator-release"
		clients        = 10
	)
	env := faultStart(t, faultSetup{})
	id := faultHeld(t, env, key)
	url := env.gw.url + "/flaky/deals"

	var (
		mu       sync.Mutex
		answers  = map[string]int{}
		executed []response
		wg       sync.WaitGroup
		released = make(chan struct{})
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Keep retrying until a delivery after the release replayed.
			for i := 0; i < 200; i++ {
				select {
				case <-released:
				default:
				}
				r, err := faultPost(url, key, `{"amount":1}`)
				mu.Lock()
				switch {
				case err != nil:
					answers["error: "+err.Error()]++
				case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true":
					answers["201 replayed"]++
				case r.status == http.StatusCreated:
					answers["201 executed"]++
					executed = append(executed, r)
				default:
					answers[fmt.Sprintf("%d %s", r.status, r.kind())]++
				}
				mu.Unlock()
				if err == nil && r.header.Get("Idempotent-Replayed") == "true" {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	status, body := adminPost(t, env.gw, "/idempotency/records/"+id+"/release", "")
	close(released)
	if status != http.StatusOK || !strings.Contains(string(body), `"state":"released"`) {
		t.Errorf("operator release: %d %s, want 200 and the released record", status, body)
	}
	wg.Wait()
	t.Logf("answers: %v", answers)
	for answer := range answers {
		switch answer {
		case "201 replayed", "201 executed", "409 outcome-unknown", "409 in-flight":
		default:
			t.Errorf("unexpected answer %q", answer)
		}
	}
	if len(executed) != 1 {
		t.Errorf("%d retries executed after the release, want exactly 1", len(executed))
	}
	if r := faultDeliver(t, url, key, `{"amount":1}`); r.header.Get("Idempotent-Replayed") != "true" || len(executed) == 1 && !bytes.Equal(r.body, executed[0].body) {
		t.Errorf("final retry: %d %s, want a replay of the execution after the release", r.status, r.body)
	}
	faultCheckExecutions(t, env.up, key, wantExecutions)
	faultCheckRecord(t, env.gw, id, faultWant{state: store.StateCompleted, executions: 2, status: 201})
}

// TestFaultOperatorCompleteThenReplay: an operator who verified in the
// business system what the held call did records that outcome through the
// admin API; retries replay it and the upstream is not called again.
//
// Expected: 1 business execution (the 500); record completed with the
// operator's result (201, external id D-9021), executions 1.
func TestFaultOperatorCompleteThenReplay(t *testing.T) {
	t.Parallel()
	const (
		wantExecutions = 1
		key            = "operator-complete"
	)
	env := faultStart(t, faultSetup{})
	id := faultHeld(t, env, key)
	url := env.gw.url + "/flaky/deals"

	verified := `{"id":"D-9021","verified":true}`
	status, body := adminPost(t, env.gw, "/idempotency/records/"+id+"/complete",
		fmt.Sprintf(`{"status":201,"headers":{"Content-Type":["application/json"],"Location":"/deals/D-9021"},"body":%q,"external_id":"D-9021"}`, verified))
	if status != http.StatusOK || !strings.Contains(string(body), `"state":"completed"`) {
		t.Fatalf("operator complete: %d %s, want 200 and the completed record", status, body)
	}
	for range 3 {
		r := faultDeliver(t, url, key, `{"amount":1}`)
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || string(r.body) != verified {
			t.Errorf("retry: %d replayed=%q %s, want the operator's 201 %s replayed", r.status, r.header.Get("Idempotent-Replayed"), r.body, verified)
		}
		if r.header.Get("Content-Type") != "application/json" || r.header.Get("Location") != "/deals/D-9021" {
			t.Errorf("replayed headers %v, want the operator's", r.header)
		}
	}
	faultCheckExecutions(t, env.up, key, wantExecutions)
	rec := faultCheckRecord(t, env.gw, id, faultWant{state: store.StateCompleted, executions: 1, attempts: 5, status: 201})
	if rec.ExternalID != "D-9021" || rec.Body == nil || *rec.Body != verified {
		t.Errorf("record external id %q body %v, want D-9021 and %s", rec.ExternalID, rec.Body, verified)
	}
}
