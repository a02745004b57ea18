package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// recoveryRules: a CRM route with a retry budget of 3, an owner, kept
// requests (with the tracing header) and re-drive credentials, and a
// route whose failures are held as outcome unknown.
const recoveryRules = `routes:
  - name: create_crm_deal
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
    owner: payments-team
    retry: { max_executions: 3 }
    keep_request: true
    keep_headers: [X-Trace]
    redrive_headers: { X-Redrive-Token: "{env.CRM_REDRIVE_TOKEN}" }
  - name: unsure
    match: { path: /unsure }
    key: ["{header.Idempotency-Key}"]
    owner: payments-team
    keep_request: true
`

// bodyMarker is in every request body and one header of the recovery
// tests: the kept request must never be readable at rest.
const bodyMarker = "MARKER-a91c7e-customer-C-17"

// outage is a CRM that answers 503 ("not done") until it is back, and
// then creates deals. It counts every call and keeps the last request.
type outage struct {
	fake
	up    atomic.Bool
	calls atomic.Int64

	mu   sync.Mutex
	last *http.Request
	body []byte
}

func newOutage(t *testing.T) *outage {
	o := &outage{}
	o.fake = startFake(t, o.serve)
	return o
}

func (o *outage) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	n := o.calls.Add(1)
	o.mu.Lock()
	o.last, o.body = r, body
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/unsure":
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":"timeout while saving"}`)
	case !o.up.Load():
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":"CRM is down for maintenance"}`)
	default:
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"D-%d"}`, 9000+n)
	}
}

func (o *outage) lastRequest() (*http.Request, []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last, o.body
}

// startRecoveryGateway runs a gateway as cfg says on be's store, with the
// secret that keep_request needs and the re-drive credential in its
// environment, and returns it with the store's Caddyfile arguments.
func startRecoveryGateway(t *testing.T, be backend, cfg gatewayConfig) (*gateway, string) {
	t.Helper()
	storeArg := be.store(t)
	cfg.store = storeArg
	cfg.extra = withSecret(cfg.extra)
	g := writeGateway(t, cfg)
	g.env = []string{"CRM_REDRIVE_TOKEN=redrive-credential-42"}
	g.start()
	t.Cleanup(g.stop)
	return g, storeArg
}

// dealBody is the deal the recovery tests create.
var dealBody = []byte(`{"customer_id":"C-17","amount":"120.00","note":"` + bodyMarker + `"}`)

func postDeal(t *testing.T, g *gateway, path, key string) response {
	t.Helper()
	return send(t, "POST", g.url+path, dealBody, "Idempotency-Key", key, "Content-Type", "application/json",
		"Authorization", "Bearer client-credential-7", "X-Trace", bodyMarker)
}

// TestRetriesExhausted: a route with max_executions 3 against an upstream
// that answers 503 executes 3 times, then answers retries-exhausted
// without forwarding; the record says so in the admin API; Run now on it
// executes once when the CRM is back and the client's retry replays that;
// Run now on a record held as outcome unknown is refused; and the kept
// request is not readable in the store.
func TestRetriesExhausted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		crm := newOutage(t)
		g, storeArg := startRecoveryGateway(t, be, gatewayConfig{upstream: crm.addr(), rules: recoveryRules})
		const key = "evt_184:create_crm_deal"

		for i := 1; i <= 3; i++ {
			r := postDeal(t, g, "/crm/deals", key)
			if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "maintenance") || r.header.Get("Retry-After") != "30" {
				t.Fatalf("execution %d: %d %v %s, want the upstream's own 503", i, r.status, r.header, r.body)
			}
		}
		if n := crm.calls.Load(); n != 3 {
			t.Fatalf("upstream calls after 3 requests: %d, want 3", n)
		}
		var id string
		for i := 4; i <= 5; i++ {
			r := postDeal(t, g, "/crm/deals", key)
			if !isProblem(t, r, http.StatusConflict, "retries-exhausted", "") {
				t.Fatalf("request %d: %d %s, want 409 retries-exhausted", i, r.status, r.body)
			}
			p := r.problem(t)
			id, _ = p["record_id"].(string)
			if len(id) != 32 || p["owner"] != "payments-team" || p["route"] != "create_crm_deal" {
				t.Fatalf("request %d: the problem names no record or owner: %s", i, r.body)
			}
		}
		if n := crm.calls.Load(); n != 3 {
			t.Fatalf("upstream calls after 5 requests: %d, want 3 (nothing forwarded once exhausted)", n)
		}
		t.Logf("%s: 5 requests, upstream calls %d; request 4 and 5 got 409 retries-exhausted for record %s", be.name, crm.calls.Load(), id)
		if v := metric(t, g, "idemgate_retries_exhausted_total", `route="create_crm_deal"`); v != 1 {
			t.Fatalf("idemgate_retries_exhausted_total = %v, want 1", v)
		}
		if !strings.Contains(g.logs.String(), `"owner":"payments-team"`) {
			t.Fatal("no log line names the owner")
		}

		var rec struct {
			State   string `json:"state"`
			Owner   string `json:"owner"`
			Reason  string `json:"reason"`
			Retries struct {
				NotDone int `json:"not_done"`
				Answers []struct {
					At     time.Time `json:"at"`
					Status int       `json:"status"`
				} `json:"answers"`
				KeptRequest bool `json:"kept_request"`
			} `json:"retries"`
			Audit []struct{ Actor, Action, Reason string }
		}
		adminJSON(t, g, "GET", "/idempotency/records/"+id, "", &rec)
		if rec.State != "retries_exhausted" || rec.Owner != "payments-team" || rec.Reason != "retries exhausted" ||
			rec.Retries.NotDone != 3 || len(rec.Retries.Answers) != 3 || rec.Retries.Answers[2].Status != 503 || !rec.Retries.KeptRequest {
			t.Fatalf("record view: %+v", rec)
		}
		if recs := adminList(t, g, "state=retries_exhausted", 0); len(recs) != 1 || recs[0].ID != id {
			t.Fatalf("listing state=retries_exhausted: %+v", recs)
		}

		// The kept request is not readable at rest.
		checkNotAtRest(t, g, be, storeArg, id)

		// An outcome-unknown record is refused.
		if r := postDeal(t, g, "/unsure", "unsure-1"); r.status != 500 {
			t.Fatalf("/unsure: %d %s", r.status, r.body)
		}
		unsure := heldID(t, postDeal(t, g, "/unsure", "unsure-1"), "retry of /unsure")
		before := crm.calls.Load()
		msg := adminError(t, g, "POST", "/idempotency/records/"+unsure+"/run", `{"reason":"try it"}`, http.StatusConflict)
		if !strings.Contains(msg, "held as outcome unknown") || crm.calls.Load() != before {
			t.Fatalf("Run now on an outcome-unknown record: %q, upstream calls %d -> %d", msg, before, crm.calls.Load())
		}
		t.Logf("%s: Run now on outcome-unknown record %s refused with 409: %s", be.name, unsure, msg)
		// A reason is required.
		adminError(t, g, "POST", "/idempotency/records/"+id+"/run", `{}`, http.StatusBadRequest)

		// The CRM is back: Run now executes once, the client's retry
		// replays it.
		crm.up.Store(true)
		before = crm.calls.Load()
		var run struct {
			UpstreamStatus int `json:"upstream_status"`
			Record         struct {
				State      string `json:"state"`
				ExternalID string `json:"external_id"`
				Executions int    `json:"executions"`
				Audit      []struct{ Actor, Action, Reason string }
			} `json:"record"`
		}
		adminJSON(t, g, "POST", "/idempotency/records/"+id+"/run", `{"reason":"CRM is back after the outage"}`, &run)
		if run.UpstreamStatus != 201 || run.Record.State != "completed" || run.Record.Executions != 4 ||
			len(run.Record.Audit) != 1 || run.Record.Audit[0].Action != "run" || run.Record.Audit[0].Actor != "admin-api" ||
			run.Record.Audit[0].Reason != "CRM is back after the outage" {
			t.Fatalf("run: %+v", run)
		}
		if n := crm.calls.Load() - before; n != 1 {
			t.Fatalf("upstream calls of the run: %d, want 1", n)
		}
		last, body := crm.lastRequest()
		if !bytes.Equal(body, dealBody) || last.Method != "POST" || last.URL.Path != "/crm/deals" ||
			last.Header.Get("Authorization") != "" || last.Header.Get("X-Redrive-Token") != "redrive-credential-42" ||
			last.Header.Get("X-Trace") != bodyMarker || !strings.Contains(last.Header.Get("Idempotency-Key"), key) {
			t.Fatalf("the re-driven request: %s %s %v %s", last.Method, last.URL, last.Header, body)
		}
		r := postDeal(t, g, "/crm/deals", key)
		if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(r.body), run.Record.ExternalID) {
			t.Fatalf("the client's retry after the run: %d %v %s", r.status, r.header, r.body)
		}
		if n := crm.calls.Load() - before; n != 1 {
			t.Fatalf("upstream calls after the run and a retry: %d, want 1", n)
		}
		if v := metric(t, g, "idemgate_redrives_total", `route="create_crm_deal"`, `result="completed"`); v != 1 {
			t.Fatalf("idemgate_redrives_total completed = %v", v)
		}
		adminError(t, g, "POST", "/idempotency/records/"+id+"/run", `{"reason":"again"}`, http.StatusConflict)
		t.Logf("%s: Run now answered %d (%s), upstream calls total %d; the retry replayed it", be.name, run.UpstreamStatus, run.Record.ExternalID, crm.calls.Load())
	})
}

// checkNotAtRest looks for the body marker in everything the store keeps:
// the embedded store's files, every Redis key's value. The record id is
// found there (the search sees the data), the marker never.
func checkNotAtRest(t *testing.T, g *gateway, be backend, storeArg, id string) {
	t.Helper()
	var blobs [][]byte
	switch be.name {
	case "embedded":
		dir := filepath.Join(g.dir, "store")
		err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			blobs = append(blobs, b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	case "redis":
		addr := strings.TrimSuffix(strings.TrimPrefix(storeArg, "redis://"), "/0")
		host, port, _ := strings.Cut(addr, ":")
		cli := func(args ...string) []byte {
			out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port, "--no-raw"}, args...)...).Output()
			if err != nil {
				t.Fatalf("redis-cli %v: %v", args, err)
			}
			return out
		}
		keys := strings.Fields(string(cli("--scan")))
		for _, k := range keys {
			k = strings.Trim(k, `"`)
			blobs = append(blobs, cli("DUMP", k))
			if typ := strings.TrimSpace(string(cli("TYPE", k))); typ == "string" {
				blobs = append(blobs, cli("GET", k))
			}
		}
		t.Logf("redis: %d keys read", len(keys))
	case "postgres":
		blobs = postgresRows(t, storeArg)
	}
	seenID := false
	for _, b := range blobs {
		seenID = seenID || bytes.Contains(b, []byte(id))
		for _, secret := range []string{bodyMarker, "client-credential-7", "customer_id"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("%s: %q is readable in the store", be.name, secret)
			}
		}
	}
	if !seenID {
		t.Fatalf("%s: the record id is nowhere in what was read (%d files or values): the search saw nothing", be.name, len(blobs))
	}
	t.Logf("%s: %d files or values read, the record id found, the body marker nowhere", be.name, len(blobs))
}

// TestBreakerOpensAndProbes: after 3 consecutive "not done" answers the
// breaker refuses new executions with 503 and Retry-After without
// forwarding, replays are still served, one probe goes through after the
// cool-down, a failed probe reopens it, a successful one closes it.
func TestBreakerOpensAndProbes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		crm := newOutage(t)
		g, _ := startRecoveryGateway(t, be, gatewayConfig{upstream: crm.addr(), rules: `routes:
  - name: create_crm_deal
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    owner: payments-team
    retry: { max_executions: 10, breaker: { failures: 3, cool_down: 2s } }
`})
		calls := func() int64 { return crm.calls.Load() }
		crm.up.Store(true)
		if r := postDeal(t, g, "/crm/deals", "done"); r.status != 201 {
			t.Fatalf("first deal: %d %s", r.status, r.body)
		}
		crm.up.Store(false)
		for i := range 3 {
			if r := postDeal(t, g, "/crm/deals", "k"+strconv.Itoa(i)); r.status != 503 || r.kind() == "breaker-open" {
				t.Fatalf("failure %d: %d %s, want the upstream's 503", i, r.status, r.body)
			}
		}
		if calls() != 4 {
			t.Fatalf("upstream calls: %d, want 4", calls())
		}
		opened := time.Now()
		r := postDeal(t, g, "/crm/deals", "k-new")
		if !isProblem(t, r, 503, "breaker-open", "") || r.header.Get("Retry-After") != "2" || r.problem(t)["owner"] != "payments-team" {
			t.Fatalf("a new execution with the breaker open: %d %v %s", r.status, r.header, r.body)
		}
		if r := postDeal(t, g, "/crm/deals", "done"); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a replay with the breaker open: %d %s", r.status, r.body)
		}
		if calls() != 4 {
			t.Fatalf("upstream calls while open: %d, want 4", calls())
		}
		if v := metric(t, g, "idemgate_breaker_open", `route="create_crm_deal"`); v != 1 {
			t.Fatalf("idemgate_breaker_open = %v, want 1", v)
		}
		t.Logf("%s: open after 3 failures; upstream calls %d (1 success + 3 failures), a new key refused with Retry-After 2, a replay served", be.name, calls())

		// After the cool-down one probe goes through; it fails and the
		// breaker opens for a full cool-down again.
		time.Sleep(time.Until(opened.Add(2100 * time.Millisecond)))
		if r := postDeal(t, g, "/crm/deals", "probe-1"); r.status != 503 || r.kind() == "breaker-open" {
			t.Fatalf("the probe: %d %s, want the upstream's 503", r.status, r.body)
		}
		reopened := time.Now()
		if calls() != 5 {
			t.Fatalf("upstream calls after the probe: %d, want 5", calls())
		}
		if r := postDeal(t, g, "/crm/deals", "k-after-probe"); !isProblem(t, r, 503, "breaker-open", "") || r.header.Get("Retry-After") != "2" {
			t.Fatalf("after a failed probe: %d %v %s, want a full cool-down", r.status, r.header, r.body)
		}
		if calls() != 5 {
			t.Fatalf("upstream calls after a failed probe: %d, want 5", calls())
		}

		// The CRM is back: the next probe closes the breaker.
		crm.up.Store(true)
		time.Sleep(time.Until(reopened.Add(2100 * time.Millisecond)))
		if r := postDeal(t, g, "/crm/deals", "probe-2"); r.status != 201 {
			t.Fatalf("the second probe: %d %s", r.status, r.body)
		}
		if r := postDeal(t, g, "/crm/deals", "k-closed"); r.status != 201 {
			t.Fatalf("after a successful probe: %d %s", r.status, r.body)
		}
		if calls() != 7 {
			t.Fatalf("upstream calls at the end: %d, want 7", calls())
		}
		if v := metric(t, g, "idemgate_breaker_open", `route="create_crm_deal"`); v != 0 {
			t.Fatalf("idemgate_breaker_open = %v after closing, want 0", v)
		}
		t.Logf("%s: probe 1 failed (calls 5, reopened), probe 2 succeeded (calls 6), closed (calls 7)", be.name)
	})
}

// TestRunNowInBrowser: a record held after 503s is run again from the
// console in a real browser: it executes once, the client's retry
// replays it, and the audit trail shows who and why. A record held as
// outcome unknown offers no Run now.
func TestRunNowInBrowser(t *testing.T) {
	exe := chromium(t)
	const user, password = "alice", "correct horse battery staple"
	forEachBackend(t, func(t *testing.T, be backend) {
		crm := newOutage(t)
		site, console := authedConsole(t, user, password)
		g, _ := startRecoveryGateway(t, be, gatewayConfig{upstream: crm.addr(), rules: recoveryRules, sites: site})

		const key = "evt_184:create_crm_deal"
		for range 3 {
			postDeal(t, g, "/crm/deals", key)
		}
		r := postDeal(t, g, "/crm/deals", key)
		if !isProblem(t, r, http.StatusConflict, "retries-exhausted", "") {
			t.Fatalf("after 3 executions: %d %s", r.status, r.body)
		}
		id := r.problem(t)["record_id"].(string)
		postDeal(t, g, "/unsure", "unsure-1")
		unsure := heldID(t, postDeal(t, g, "/unsure", "unsure-1"), "retry of /unsure")
		if crm.calls.Load() != 4 {
			t.Fatalf("upstream calls: %d, want 4", crm.calls.Load())
		}

		b := newBrowser(t, exe, user, password)
		b.do(chromedp.Navigate(console), chromedp.WaitVisible(chromedp.CSS(".queue")))
		mustSee(t, b.text(), "retries exhausted", "payments-team", "None: held until an operator acts", "Run now")
		b.shot("recovery-queue-" + be.name)

		b.do(chromedp.Navigate(console+"records/"+id), chromedp.WaitVisible(chromedp.ID("run-h")))
		mustSee(t, b.text(), "Held: retries exhausted", "Owner", "payments-team", "What each execution answered",
			"3 executions ended \"not done\"", "did not take effect", "Next attempt", "Run now")
		b.shot("recovery-record-exhausted-" + be.name)

		// Run now obeys the console's rules: a form without its token, or
		// from another site, is refused, and nothing runs.
		form := url.Values{"reason": {"no token"}}
		basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
		for _, extra := range [][]string{nil, {"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}} {
			hdr := append([]string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", basic}, extra...)
			if r := send(t, "POST", console+"records/"+id+"/run", []byte(form.Encode()), hdr...); r.status != http.StatusForbidden {
				t.Fatalf("Run now POST %v: %d %s, want 403", extra, r.status, r.body)
			}
		}
		if r := send(t, "POST", console+"records/"+id+"/run", []byte(form.Encode()), "Content-Type", "application/x-www-form-urlencoded"); r.status != http.StatusUnauthorized {
			t.Fatalf("Run now POST without credentials: %d", r.status)
		}
		if n := crm.calls.Load(); n != 4 {
			t.Fatalf("upstream calls after refused Run now POSTs: %d, want 4", n)
		}

		// The CRM is back: Run now.
		crm.up.Store(true)
		const why = "CRM maintenance ended at 14:05; the sender gave up"
		b.do(
			chromedp.SetValue(chromedp.ID("n-reason"), why),
			chromedp.Click(chromedp.CSS(`form[action$="/run"] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(".banner.ok")),
		)
		mustSee(t, b.text(), "Ran once more: the upstream answered 201", "Run now by alice", "Reason: "+why)
		b.shot("recovery-record-run-" + be.name)
		if n := crm.calls.Load(); n != 5 {
			t.Fatalf("upstream calls after Run now: %d, want 5 (one execution)", n)
		}
		last, _ := crm.lastRequest()
		if last.Header.Get("Authorization") != "" || last.Header.Get("X-Redrive-Token") != "redrive-credential-42" {
			t.Fatalf("the re-driven request's credentials: %v", last.Header)
		}

		// The client's retry replays it.
		r = postDeal(t, g, "/crm/deals", key)
		if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the client's retry: %d %v %s", r.status, r.header, r.body)
		}
		if n := crm.calls.Load(); n != 5 {
			t.Fatalf("upstream calls after the retry: %d, want 5", n)
		}

		// The audit trail says who and why.
		var view struct {
			State string
			Audit []struct{ Actor, Action, Reason string }
		}
		adminJSON(t, g, "GET", "/idempotency/records/"+id, "", &view)
		if view.State != "completed" || len(view.Audit) != 1 || view.Audit[0].Actor != user ||
			view.Audit[0].Action != "run" || view.Audit[0].Reason != why {
			t.Fatalf("record view after the run: %+v", view)
		}

		// An outcome-unknown record offers no Run now.
		b.do(chromedp.Navigate(console+"records/"+unsure), chromedp.WaitVisible(chromedp.ID("release-h")))
		page := b.text()
		mustSee(t, page, "Held: outcome unknown", "payments-team")
		if strings.Contains(page, "Run now\n") || strings.Contains(page, "Send the kept request upstream once more") {
			t.Fatalf("the outcome-unknown record offers Run now:\n%s", page)
		}
		if n := crm.calls.Load(); n != 5 {
			t.Fatalf("upstream calls at the end: %d, want 5", n)
		}
		t.Logf("%s: held after 3 executions (calls 3), Run now from the console by %s executed once (calls 5 with /unsure's 1), the retry replayed it; audit: %+v",
			be.name, user, view.Audit)
	})
}
