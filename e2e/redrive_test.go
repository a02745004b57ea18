package e2e

import (
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// What may be run again: the recovery path's rules on the real binary.

// releaseRules: a route whose unknown outcomes on_unknown_outcome: release
// lets go, with a retry budget of 3, kept requests and waiting duplicates.
const releaseRules = `routes:
  - name: reset_release
    match: { path: /reset/deal }
    key: ["{header.Idempotency-Key}"]
    owner: payments-team
    on_unknown_outcome: release
    on_in_flight: wait
    retry: { max_executions: 3 }
    keep_request: true
  - name: unsure_release
    match: { path: /unsure }
    key: ["{header.Idempotency-Key}"]
    owner: payments-team
    on_unknown_outcome: release
    keep_request: true
`

// TestReleasedUnknownCountsAgainstBudget: with on_unknown_outcome:
// release and max_executions 3, an upstream that acts and then resets the
// connection is called at most 3 times for one key, by sequential
// retries and by a herd of waiting duplicates alike; after that the
// record is held as retries exhausted (409 retries-exhausted), and Run now
// on it is refused: the upstream may have acted.
func TestReleasedUnknownCountsAgainstBudget(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		up := newFaultUpstream(t)
		g, _ := startRecoveryGateway(t, be, gatewayConfig{upstream: up.addr, rules: releaseRules})

		const key = "evt_reset_sequential"
		statuses := map[int]int{}
		var id string
		for range 6 {
			r := postDeal(t, g, "/reset/deal", key)
			statuses[r.status]++
			if r.status == http.StatusConflict && isProblem(t, r, http.StatusConflict, "retries-exhausted", "") {
				id, _ = r.problem(t)["record_id"].(string)
			}
		}
		n := up.executions(key)
		t.Logf("%s: 6 sequential requests of one key: upstream executions %d, answers %v", be.name, n, statuses)
		if n != 3 || statuses[http.StatusConflict] != 3 || id == "" {
			t.Fatalf("%s: upstream executions %d, answers %v; want 3 executions, then 409 retries-exhausted", be.name, n, statuses)
		}
		var rec struct {
			State      string `json:"state"`
			Executions int    `json:"executions"`
			Retries    struct {
				NotDone  int `json:"not_done"`
				Unknowns int `json:"unknowns"`
			} `json:"retries"`
		}
		adminJSON(t, g, "GET", "/idempotency/records/"+id, "", &rec)
		if rec.State != "retries_exhausted" || rec.Executions != 3 || rec.Retries.NotDone != 3 || rec.Retries.Unknowns != 3 {
			t.Fatalf("%s: record %+v, want retries_exhausted after 3 executions, all unknown outcomes", be.name, rec)
		}
		msg := adminError(t, g, "POST", "/idempotency/records/"+id+"/run", `{"reason":"the CRM is back"}`, http.StatusConflict)
		if !strings.Contains(msg, "may have acted") || up.executions(key) != 3 {
			t.Fatalf("%s: Run now on a budget used up by unknown outcomes: %q, upstream executions %d", be.name, msg, up.executions(key))
		}
		t.Logf("%s: Run now refused with 409: %s", be.name, msg)

		// A herd of waiting duplicates of one key.
		const herdKey = "evt_reset_herd"
		var exhausted atomic.Int64
		together(40, func(int) {
			r, err := do(client, "POST", g.url+"/reset/deal", dealBody, "Idempotency-Key", herdKey, "Content-Type", "application/json")
			if err == nil && r.status == http.StatusConflict && r.kind() == "retries-exhausted" {
				exhausted.Add(1)
			}
		})
		t.Logf("%s: a herd of 40 (on_in_flight: wait): upstream executions %d, %d answered 409 retries-exhausted",
			be.name, up.executions(herdKey), exhausted.Load())
		if n := up.executions(herdKey); n > 3 {
			t.Fatalf("%s: a herd of 40 executed one key %d times, want at most 3", be.name, n)
		}
	})
}

// TestRunNowRefusedAfterUnknownRelease: on_unknown_outcome: release lets a
// record go after the upstream acted and answered 500; Run now on it is
// refused (409), the upstream is not called again, and the record says
// why it was released.
func TestRunNowRefusedAfterUnknownRelease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		crm := newOutage(t)
		g, _ := startRecoveryGateway(t, be, gatewayConfig{upstream: crm.addr(), rules: releaseRules})
		if r := postDeal(t, g, "/unsure", "evt_unsure_release"); r.status != http.StatusInternalServerError {
			t.Fatalf("%s: /unsure: %d %s", be.name, r.status, r.body)
		}
		recs := adminList(t, g, "state=released", 0)
		if len(recs) != 1 {
			t.Fatalf("%s: released records: %+v", be.name, recs)
		}
		id := recs[0].ID
		var rec struct {
			State  string `json:"state"`
			Reason string `json:"reason"`
		}
		adminJSON(t, g, "GET", "/idempotency/records/"+id, "", &rec)
		code, body := adminDo(t, g, "POST", "/idempotency/records/"+id+"/run", `{"reason":"the sender gave up"}`)
		t.Logf("%s: record %s state %s reason %q; Run now: %d %s; upstream executions %d",
			be.name, id, rec.State, rec.Reason, code, body, crm.calls.Load())
		if code != http.StatusConflict || !strings.Contains(string(body), "may have acted") {
			t.Fatalf("%s: Run now on a record released by on_unknown_outcome: %d %s, want 409", be.name, code, body)
		}
		if n := crm.calls.Load(); n != 1 {
			t.Fatalf("%s: upstream executions %d, want 1", be.name, n)
		}
		if rec.State != "released" || rec.Reason != "unknown_released" {
			t.Fatalf("%s: record state %s reason %q, want released with reason unknown_released", be.name, rec.State, rec.Reason)
		}
	})
}

// TestRunNowAfterRestartAndReload: Run now works right after a restart on
// the same store and right after a reload, before any client request
// reached the route; it runs exactly once, and the handlers before the
// idempotency handler stay out of it: a request_header before it stamps
// every request it sees with a fresh id, and the re-driven request
// carries the stamp of the client's last request (kept with it), not a
// new one.
func TestRunNowAfterRestartAndReload(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		crm := newOutage(t)
		// The stamp is one of the headers the route keeps for a re-drive.
		rules := strings.Replace(recoveryRules, "keep_headers: [X-Trace]", "keep_headers: [X-Trace, X-Before-Idempotency]", 1)
		cfg := gatewayConfig{upstream: crm.addr(), rules: rules, store: be.store(t), extra: withSecret("")}
		g := writeGateway(t, cfg)
		caddyfile, err := os.ReadFile(g.caddyfile)
		if err != nil {
			t.Fatal(err)
		}
		stamped := strings.Replace(string(caddyfile), "\treverse_proxy ", "\trequest_header X-Before-Idempotency {http.request.uuid}\n\treverse_proxy ", 1)
		if err := os.WriteFile(g.caddyfile, []byte(stamped), 0o644); err != nil {
			t.Fatal(err)
		}
		g.env = []string{"CRM_REDRIVE_TOKEN=redrive-credential-42"}
		g.start()
		t.Cleanup(g.stop)

		// Two operations use up their budgets while the CRM is down.
		ids, stamps := map[string]string{}, map[string]string{}
		for _, key := range []string{"evt_restart", "evt_reload"} {
			for range 3 {
				postDeal(t, g, "/crm/deals", key)
			}
			last, _ := crm.lastRequest()
			stamps[key] = last.Header.Get("X-Before-Idempotency")
			ids[key] = heldID(t, postDeal(t, g, "/crm/deals", key), "retry of "+key)
		}
		if stamps["evt_restart"] == "" || stamps["evt_restart"] == stamps["evt_reload"] {
			t.Fatalf("%s: the request_header before idempotency did not stamp the clients' requests: %v", be.name, stamps)
		}
		crm.up.Store(true)

		runNow := func(when, key string) {
			t.Helper()
			before := crm.calls.Load()
			code, body := adminDo(t, g, "POST", "/idempotency/records/"+ids[key]+"/run", `{"reason":"the CRM is back"}`)
			t.Logf("%s: Run now %s: %d %s; upstream calls %d", be.name, when, code, body, crm.calls.Load()-before)
			if code != http.StatusOK || !strings.Contains(string(body), `"upstream_status":201`) {
				t.Fatalf("%s: Run now %s: %d %s, want 200 with the upstream's 201", be.name, when, code, body)
			}
			if n := crm.calls.Load() - before; n != 1 {
				t.Fatalf("%s: Run now %s called the upstream %d times, want 1", be.name, when, n)
			}
			last, _ := crm.lastRequest()
			if got := last.Header.Get("X-Before-Idempotency"); got != stamps[key] || last.Header.Get("X-Redrive-Token") != "redrive-credential-42" {
				t.Fatalf("%s: the re-driven request %s: stamp %q, want the client's %q (a handler before idempotency ran again?); headers %v",
					be.name, when, got, stamps[key], last.Header)
			}
		}

		g.restart()
		runNow("right after a restart", "evt_restart")

		out, err := g.command("reload", "--force", "--config", g.caddyfile, "--adapter", "caddyfile",
			"--address", strings.TrimPrefix(g.admin, "http://")).CombinedOutput()
		if err != nil {
			t.Fatalf("reload: %v: %s", err, out)
		}
		runNow("right after a reload", "evt_reload")

		// The clients' retries replay what the runs recorded.
		for key := range ids {
			if r := postDeal(t, g, "/crm/deals", key); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("%s: the retry of %s after the run: %d %v %s", be.name, key, r.status, r.header, r.body)
			}
		}
	})
}
