package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/store"
)

// The verification suite: the real binary in front of a CRM that records
// which deals each Idempotency-Key created and answers
// GET /crm/deals?source_key=K, on the embedded store and a real
// redis-server. Every test states the deals created (the CRM's own
// count) and the record's final state.

// verifyToken is the secret the checks authenticate with: it must reach
// the CRM and appear nowhere else.
const verifyToken = "crm-token-7f3a9c1e5b"

// verifyRules: short schedules so a test takes a second or two.
const verifyRules = `
defaults:
  ttl: 1h
  lock_lease: 1s
routes:
  - name: verified
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
    verify:
      url: "{env.VERIFY_CRM_URL}/crm/deals?source_key={key}"
      headers: { Authorization: "Bearer {env.VERIFY_CRM_TOKEN}" }
      timeout: 1s
      found: { status: [200], id: "0.id" }
      replay_status: 201
      after: 200ms
      every: 2s
      attempts: 3
  - name: fast_fail
    match: { path: /fast/deals }
    key: ["{header.Idempotency-Key}"]
    verify:
      url: "{env.VERIFY_CRM_URL}/crm/deals?source_key={key}"
      headers: { Authorization: "Bearer {env.VERIFY_CRM_TOKEN}" }
      timeout: 1s
      found: { id: "0.id" }
      after: 100ms
      every: 200ms
      attempts: 3
  - name: strict
    match: { path: /strict/deals }
    key: ["{header.Idempotency-Key}"]
    verify:
      url: "{env.VERIFY_CRM_URL}/crm/deals?source_key={key}"
      headers: { Authorization: "Bearer {env.VERIFY_CRM_TOKEN}" }
      timeout: 1s
      found: { status: [200], id: "0.id", object: "0", match: { "0.source_key": "{key}" } }
      replay_status: 201
      after: 200ms
      every: 2s
      attempts: 3
  - name: manual
    match: { path: /manual/deals }
    key: ["{header.Idempotency-Key}"]
    verify:
      url: "{env.VERIFY_CRM_URL}/crm/deals?source_key={key}"
      headers: { Authorization: "Bearer {env.VERIFY_CRM_TOKEN}" }
      timeout: 5s
      found: { id: "0.id" }
      attempts: 0
`

// verifyCRM is the CRM: POST creates a deal for the request's
// Idempotency-Key and answers 201, unless X-Test-Fail says "reset"
// (create, then reset the connection), "fail" (500, nothing created) or
// "hang" (create, then wait for the key's gate). GET lists the deals of
// a source key.
type verifyCRM struct {
	fake
	gates gates // "hang" creations by key

	mu      sync.Mutex
	deals   map[string][]string // by source key
	created int
	auth    map[string]bool // Authorization values seen on lookups

	lookupFails  atomic.Bool                   // every lookup answers 500
	lookupMode   atomic.Value                  // "other": another key's deal; "everything": every deal, the filter ignored
	lookupGate   atomic.Pointer[chan struct{}] // lookups wait for it when set
	lookups      atomic.Int64
	inLookup     atomic.Int64
	maxInLookup  atomic.Int64
	lookupWaited chan struct{} // a lookup arrived at the gate
	env          []string      // the gateway's VERIFY_CRM_URL and VERIFY_CRM_TOKEN
}

func newVerifyCRM(t *testing.T) *verifyCRM {
	t.Helper()
	c := &verifyCRM{
		deals: map[string][]string{}, auth: map[string]bool{},
		lookupWaited: make(chan struct{}, 100),
	}
	c.fake = startFake(t, c.serve)
	t.Cleanup(func() {
		c.gates.openAll()
		c.openLookups()
		c.srv.Close()
	})
	// The gateway's own environment, not the test process's: tests run
	// in parallel, each with a CRM of its own.
	c.env = []string{"VERIFY_CRM_URL=" + c.srv.URL, "VERIFY_CRM_TOKEN=" + verifyToken}
	return c
}

// gate makes a "hang" creation for key wait until open.
func (c *verifyCRM) gate(key string) (open func()) { return c.gates.gate(key) }

// holdLookups makes lookups wait until openLookups.
func (c *verifyCRM) holdLookups() {
	ch := make(chan struct{})
	c.lookupGate.Store(&ch)
}

func (c *verifyCRM) openLookups() {
	if ch := c.lookupGate.Swap(nil); ch != nil {
		close(*ch)
	}
}

func (c *verifyCRM) dealsOf(key string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.deals[key]...)
}

func (c *verifyCRM) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		c.lookup(w, r)
		return
	}
	if _, err := io.ReadAll(r.Body); err != nil {
		return
	}
	key := forwardedKey(r)
	fail := r.Header.Get("X-Test-Fail")
	if fail == "fail" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":"database unavailable"}`)
		return
	}
	c.mu.Lock()
	c.created++
	id := fmt.Sprintf("D-%d", 9020+c.created)
	c.deals[key] = append(c.deals[key], id)
	c.mu.Unlock()
	switch fail {
	case "reset":
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		_ = conn.Close()
		return
	case "hang":
		c.gates.wait(key, nil, 20*time.Second)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%q,"source_key":%q}`, id, key)
}

func (c *verifyCRM) lookup(w http.ResponseWriter, r *http.Request) {
	c.lookups.Add(1)
	n := c.inLookup.Add(1)
	defer c.inLookup.Add(-1)
	for {
		m := c.maxInLookup.Load()
		if n <= m || c.maxInLookup.CompareAndSwap(m, n) {
			break
		}
	}
	c.mu.Lock()
	c.auth[r.Header.Get("Authorization")] = true
	c.mu.Unlock()
	if g := c.lookupGate.Load(); g != nil {
		c.lookupWaited <- struct{}{}
		select {
		case <-*g:
		case <-time.After(20 * time.Second):
		}
	}
	if c.lookupFails.Load() {
		http.Error(w, "lookup unavailable", http.StatusInternalServerError)
		return
	}
	key := r.URL.Query().Get("source_key")
	out := []map[string]string{}
	switch mode, _ := c.lookupMode.Load().(string); mode {
	case "other":
		out = append(out, map[string]string{"id": "D-1", "source_key": "someone-else"})
	case "everything":
		c.mu.Lock()
		for k, ids := range c.deals {
			for _, id := range ids {
				out = append(out, map[string]string{"id": id, "source_key": k})
			}
		}
		c.mu.Unlock()
	default:
		for _, id := range c.dealsOf(key) {
			out = append(out, map[string]string{"id": id, "source_key": key})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func verifyGet(t *testing.T, gw *gateway, id string) adminRecord {
	t.Helper()
	var rec adminRecord
	adminJSON(t, gw, http.MethodGet, "/idempotency/records/"+id, "", &rec)
	if rec.Verification == nil {
		t.Fatalf("record %s has no verification: %+v", id, rec)
	}
	return rec
}

// verifyUntil polls the record until cond holds, for up to 10 s.
func verifyUntil(t *testing.T, gw *gateway, id, what string, cond func(adminRecord) bool) adminRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec := verifyGet(t, gw, id)
		if cond(rec) {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %s: not %s after 10s: %+v", id, what, rec)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verifyPost delivers one request; fail is the X-Test-Fail header ("" for
// none). Safe from any goroutine; a transport error is status -1.
func verifyPost(url, key, fail string) response {
	headers := []string{"Content-Type", "application/json", "Idempotency-Key", key}
	if fail != "" {
		headers = append(headers, "X-Test-Fail", fail)
	}
	r, err := do(client, http.MethodPost, url, []byte(`{"title":"Acme renewal","amount":4200}`), headers...)
	if err != nil && r.status == 0 {
		return response{status: -1, body: []byte(err.Error())}
	}
	return r
}

func verifyStart(t *testing.T, crm *verifyCRM, storeArgs string) *gateway {
	t.Helper()
	gw := startGateway(t, gatewayConfig{
		store:    storeArgs,
		upstream: crm.addr(),
		rules:    verifyRules,
		extra:    withSecret("op_timeout 500ms"),
		env:      crm.env,
	})
	t.Cleanup(client.CloseIdleConnections)
	return gw
}

// verifyReplayed asserts r is the replay of the deal the lookup found.
func verifyReplayed(t *testing.T, r response, deal string) {
	t.Helper()
	var deals []struct {
		ID string `json:"id"`
	}
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" ||
		json.Unmarshal(r.body, &deals) != nil || len(deals) != 1 || deals[0].ID != deal {
		t.Fatalf("retry: %d (replayed %q) %s, want the replayed lookup of %s as 201", r.status, r.header.Get("Idempotent-Replayed"), r.body, deal)
	}
}

// TestVerifyFindsDealAfterReset: the CRM creates the deal and resets the
// connection; `after` later the scheduled check finds the deal by the
// key, and the retry replays it. The secret check header reaches the CRM
// and appears nowhere else: not in the logs, the admin API or the record.
//
// Expected: 1 deal; record completed, reason verified, external id set,
// one applied check; the retry is a replay (201, the deal found).
func TestVerifyFindsDealAfterReset(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		crm := newVerifyCRM(t)
		storeArgs := b.store(t)
		gw := verifyStart(t, crm, storeArgs)
		key := "evt_184:create_crm_deal"
		id := recordID("verified", "", key)

		if r := verifyPost(gw.url+"/crm/deals", key, "reset"); r.status != http.StatusBadGateway {
			t.Fatalf("first delivery: %d %s, want 502 (the CRM reset the connection)", r.status, r.body)
		}
		rec := verifyUntil(t, gw, id, "completed by the scheduled check", func(r adminRecord) bool { return r.State == store.StateCompleted })
		deals := crm.dealsOf(key)
		if len(deals) != 1 {
			t.Fatalf("deals for the key: %v, want 1", deals)
		}
		if rec.Reason != store.ReasonVerified || rec.ExternalID != deals[0] || rec.Status != http.StatusCreated || rec.Executions != 1 {
			t.Errorf("record: %+v, want completed (verified), external id %s, status 201, executions 1", rec, deals[0])
		}
		if v := rec.Verification; v.CheckCount != 1 || len(v.Checks) != 1 || v.Checks[0].Verdict != store.VerdictApplied || v.Checks[0].Status != 200 ||
			v.Method != http.MethodGet || !strings.HasPrefix(v.URL, "{env.VERIFY_CRM_URL}/crm/deals?source_key=") {
			t.Errorf("verification: %+v", v)
		}
		verifyReplayed(t, verifyPost(gw.url+"/crm/deals", key, ""), deals[0])
		if n := len(crm.dealsOf(key)); n != 1 {
			t.Errorf("deals after the retry: %d, want 1", n)
		}
		if got := metric(t, gw, "idemgate_verifications_total", `route="verified"`, `verdict="applied"`); got != 1 {
			t.Errorf("idemgate_verifications_total{verdict=applied} = %v, want 1", got)
		}

		// The secret went to the CRM, and nowhere else.
		crm.mu.Lock()
		sent := crm.auth["Bearer "+verifyToken]
		crm.mu.Unlock()
		if !sent {
			t.Error("the check did not send the configured Authorization header")
		}
		_, view := adminDo(t, gw, http.MethodGet, "/idempotency/records/"+id, "")
		_, list := adminDo(t, gw, http.MethodGet, "/idempotency/records", "")
		for what, text := range map[string]string{"log": gw.logs.String(), "record view": string(view), "listing": string(list)} {
			if strings.Contains(text, verifyToken) {
				t.Errorf("the secret check header appears in the %s", what)
			}
		}
		// The gateway's own lines never name the key (Caddy's error
		// log of the 502 shows the request's headers, its own affair).
		for _, line := range strings.Split(gw.logs.String(), "\n") {
			if strings.Contains(line, `"logger":"http.handlers.idempotency"`) && strings.Contains(line, key) {
				t.Errorf("a log line of the gateway names the key: %s", line)
			}
		}
		if storeArgs == "embedded" {
			sawDeal := false // the walk reads the store's files
			_ = filepath.WalkDir(filepath.Join(gw.dir, "store"), func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, _ := os.ReadFile(path)
				if bytes.Contains(b, []byte(verifyToken)) {
					t.Errorf("the secret check header is stored in %s", path)
				}
				sawDeal = sawDeal || bytes.Contains(b, []byte(deals[0]))
				return nil
			})
			if !sawDeal {
				t.Error("no file of the embedded store holds the verified deal")
			}
		}
		if strings.HasPrefix(storeArgs, "redis://") {
			addr := strings.TrimSuffix(strings.TrimPrefix(storeArgs, "redis://"), "/0")
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			keys, err := rdb.Keys(context.Background(), "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if typ, _ := rdb.Type(context.Background(), k).Result(); typ != "string" {
					continue
				}
				if v, _ := rdb.Get(context.Background(), k).Result(); strings.Contains(v, verifyToken) {
					t.Errorf("the secret check header is stored in %s", k)
				}
			}
		}
	})
}

// TestVerifyReleasesWhenNotFound: the CRM answers 500 without creating
// anything; the lookups find nothing. One early "not found" (a retry
// right after the first check) does not release; the second counted one,
// `every` later, does, and the next retry executes once.
//
// Expected: 1 deal (the execution after the release); the early retry
// gets 409 naming the next check; the record ends completed by the
// second execution, executions 2; the retry after it replays.
func TestVerifyReleasesWhenNotFound(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		crm := newVerifyCRM(t)
		gw := verifyStart(t, crm, b.store(t))
		key := "evt_185:create_crm_deal"
		id := recordID("verified", "", key)

		if r := verifyPost(gw.url+"/crm/deals", key, "fail"); r.status != http.StatusInternalServerError {
			t.Fatalf("first delivery: %d %s, want the CRM's 500", r.status, r.body)
		}
		verifyUntil(t, gw, id, "checked once", func(r adminRecord) bool { return r.Verification.CheckCount >= 1 })
		r := verifyPost(gw.url+"/crm/deals", key, "")
		if !isProblem(t, r, http.StatusConflict, "outcome-unknown", id) {
			t.Fatalf("a retry right after the first not found: %d %s, want 409 outcome unknown", r.status, r.body)
		}
		var p struct {
			NextCheck time.Time `json:"next_check"`
		}
		if json.Unmarshal(r.body, &p) != nil || p.NextCheck.IsZero() || r.header.Get("Retry-After") == "" {
			t.Errorf("the 409 names no next check: %s (Retry-After %q)", r.body, r.header.Get("Retry-After"))
		}
		rec := verifyGet(t, gw, id)
		if rec.State != store.StateUnknown || rec.Verification.NotFoundStreak != 1 || rec.Verification.CheckCount != 2 {
			t.Fatalf("after the early not found: %+v (%+v), want held, streak 1, 2 checks", rec, rec.Verification)
		}
		rec = verifyUntil(t, gw, id, "released", func(r adminRecord) bool { return r.State == store.StateReleased })
		if rec.Reason != store.ReasonVerifiedNotApplied || rec.Verification.NotFoundStreak != 2 {
			t.Errorf("released: %+v (%+v)", rec, rec.Verification)
		}
		if n := len(crm.dealsOf(key)); n != 0 {
			t.Fatalf("deals before the retry: %d, want 0", n)
		}
		r = verifyPost(gw.url+"/crm/deals", key, "")
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry after the release: %d %s, want the CRM's own 201", r.status, r.body)
		}
		again := verifyPost(gw.url+"/crm/deals", key, "")
		if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(r.body) {
			t.Errorf("the next retry: %d (replayed %q) %s, want the replay of %s", again.status, again.header.Get("Idempotent-Replayed"), again.body, r.body)
		}
		if n := len(crm.dealsOf(key)); n != 1 {
			t.Errorf("deals: %d, want 1", n)
		}
		var done adminRecord
		adminJSON(t, gw, http.MethodGet, "/idempotency/records/"+id, "", &done)
		if done.State != store.StateCompleted || done.Executions != 2 {
			t.Errorf("record: %s, executions %d; want completed, 2", done.State, done.Executions)
		}
	})
}

// TestVerifyAfterGatewayKilled: the gateway dies (kill -9) while the CRM,
// having created the deal, is still answering. A fresh instance on the
// same Redis knows nothing of it; once the dead claim's lease runs out
// the retry turns the record outcome unknown, checks inline and replays
// the deal the lookup finds.
//
// Expected: 1 deal; the retry replays it; record completed, verified.
func TestVerifyAfterGatewayKilled(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) { verifyAfterKill(t, b.store(t)) })
}

func verifyAfterKill(t *testing.T, storeArgs string) {
	crm := newVerifyCRM(t)
	gw := verifyStart(t, crm, storeArgs)
	key := "evt_186:create_crm_deal"
	id := recordID("verified", "", key)
	defer crm.gate(key)()

	answered := make(chan response, 1)
	go func() { answered <- verifyPost(gw.url+"/crm/deals", key, "hang") }()
	waitFor(t, func() bool { return len(crm.dealsOf(key)) == 1 })
	gw.kill()
	if r := <-answered; r.status != -1 {
		t.Fatalf("a killed gateway answered %d %s", r.status, r.body)
	}
	gw.restart()

	var r response
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = verifyPost(gw.url+"/crm/deals", key, "")
		if !isProblem(t, r, http.StatusConflict, "in-flight", "") || time.Now().After(deadline) {
			break
		}
	}
	verifyReplayed(t, r, crm.dealsOf(key)[0])
	if n := len(crm.dealsOf(key)); n != 1 {
		t.Errorf("deals: %d, want 1", n)
	}
	rec := verifyGet(t, gw, id)
	if rec.State != store.StateCompleted || rec.Reason != store.ReasonVerified || rec.ExternalID != crm.dealsOf(key)[0] || rec.Executions != 1 {
		t.Errorf("record: %+v, want completed (verified), one execution", rec)
	}
	if !strings.Contains(gw.logs.String(), `"trigger":"retry"`) {
		t.Error("no inline check was logged")
	}
}

// TestVerifyLookupAlwaysFails: every lookup answers 500. The scheduled
// checks are used up and the record stays held with every check listed;
// an operator's verify adds one; a retry still gets 409.
//
// Expected: 0 deals; record outcome_unknown with attempts checks, all
// inconclusive, and no next check; one more after the operator's verify.
func TestVerifyLookupAlwaysFails(t *testing.T) {
	t.Parallel()
	crm := newVerifyCRM(t)
	crm.lookupFails.Store(true)
	gw := verifyStart(t, crm, backends[0].store(t))
	key := "evt_187:create_crm_deal"
	id := recordID("fast_fail", "", key)
	if r := verifyPost(gw.url+"/fast/deals", key, "fail"); r.status != http.StatusInternalServerError {
		t.Fatalf("first delivery: %d %s", r.status, r.body)
	}
	rec := verifyUntil(t, gw, id, "checked 3 times", func(r adminRecord) bool {
		return r.Verification.CheckCount == 3 && r.Verification.NextCheck.IsZero()
	})
	if rec.State != store.StateUnknown || len(rec.Verification.Checks) != 3 {
		t.Fatalf("after the attempts: %+v (%+v)", rec, rec.Verification)
	}
	for _, c := range rec.Verification.Checks {
		if c.Verdict != store.VerdictInconclusive || c.Status != http.StatusInternalServerError {
			t.Errorf("check %+v, want inconclusive 500", c)
		}
	}
	var after adminRecord
	adminJSON(t, gw, http.MethodPost, "/idempotency/records/"+id+"/verify", `{"reason":"CRM lookup is back?"}`, &after)
	if after.State != store.StateUnknown || after.Verification.CheckCount != 4 || len(after.Verification.Checks) != 4 {
		t.Errorf("after the operator's verify: %+v (%+v)", after, after.Verification)
	}
	if len(after.Audit) != 1 || after.Audit[0].Action != "verify" || after.Audit[0].Actor != "admin-api" || after.Audit[0].Reason != "CRM lookup is back?" {
		t.Errorf("audit after the operator's verify: %+v", after.Audit)
	}
	r := verifyPost(gw.url+"/fast/deals", key, "")
	if !isProblem(t, r, http.StatusConflict, "outcome-unknown", id) {
		t.Errorf("retry: %d %s, want 409 outcome unknown", r.status, r.body)
	}
	if n := len(crm.dealsOf(key)); n != 0 {
		t.Errorf("deals: %d, want 0", n)
	}
	if got := metric(t, gw, "idemgate_verifications_total", `route="fast_fail"`, `verdict="inconclusive"`); got != 5 {
		t.Errorf("inconclusive checks counted %v, want 5 (3 scheduled, the operator's, the retry's)", got)
	}
	msg := adminError(t, gw, http.MethodPost, "/idempotency/records/"+recordID("fast_fail", "", "no-such-key")+"/verify", "", http.StatusNotFound)
	if !strings.Contains(msg, "not found") {
		t.Errorf("verify of a missing record: %q", msg)
	}
}

// TestVerifyRacingRetries: 50 retries of one held record arrive at once
// while the lookup is slow. At most one check runs at a time; every
// retry gets the replay of the one deal or a 409, never an execution.
// Then an operator's release while another operator's check runs is
// refused: the check's verdict stands.
//
// Expected: 1 deal; never two lookups at once; record completed,
// verified, with one applied check. Second record: the release 409, the
// record completed by the operator's check.
func TestVerifyRacingRetries(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) { verifyRacing(t, b.store(t)) })
}

func verifyRacing(t *testing.T, storeArgs string) {
	crm := newVerifyCRM(t)
	gw := verifyStart(t, crm, storeArgs)
	key := "evt_188:create_crm_deal"
	id := recordID("verified", "", key)
	if r := verifyPost(gw.url+"/crm/deals", key, "reset"); r.status != http.StatusBadGateway {
		t.Fatalf("first delivery: %d %s", r.status, r.body)
	}
	crm.holdLookups()
	answers := make(chan response, 50)
	for range 50 {
		go func() { answers <- verifyPost(gw.url+"/crm/deals", key, "") }()
	}
	<-crm.lookupWaited
	time.Sleep(300 * time.Millisecond) // the racers pile up behind the lease
	crm.openLookups()
	deal := crm.dealsOf(key)[0]
	replays, conflicts := 0, 0
	for range 50 {
		r := <-answers
		switch {
		case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true" && strings.Contains(string(r.body), deal):
			replays++
		case isProblem(t, r, http.StatusConflict, "outcome-unknown", id):
			conflicts++
		default:
			t.Errorf("a racing retry got %d %s", r.status, r.body)
		}
	}
	t.Logf("50 racing retries: %d replays, %d 409s, %d lookups", replays, conflicts, crm.lookups.Load())
	if replays == 0 {
		t.Error("no racing retry got the replay")
	}
	if m := crm.maxInLookup.Load(); m != 1 {
		t.Errorf("%d lookups ran at once, want 1", m)
	}
	if n := len(crm.dealsOf(key)); n != 1 {
		t.Errorf("deals: %d, want 1", n)
	}
	rec := verifyGet(t, gw, id)
	applied := 0
	for _, c := range rec.Verification.Checks {
		if c.Verdict == store.VerdictApplied {
			applied++
		}
	}
	if rec.State != store.StateCompleted || rec.Reason != store.ReasonVerified || applied != 1 {
		t.Errorf("record: %+v, %d applied checks; want completed (verified), 1", rec, applied)
	}

	// An operator's verify waits on the lookup while another operator
	// tries to release the record.
	late := "evt_189:create_crm_deal"
	lateID := recordID("manual", "", late)
	if r := verifyPost(gw.url+"/manual/deals", late, "reset"); r.status != http.StatusBadGateway {
		t.Fatalf("first delivery: %d %s", r.status, r.body)
	}
	crm.holdLookups()
	verified := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, gw.admin+"/idempotency/records/"+lateID+"/verify", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			verified <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		verified <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	<-crm.lookupWaited
	adminError(t, gw, http.MethodPost, "/idempotency/records/"+lateID+"/release", "", http.StatusConflict)
	crm.openLookups()
	if got := <-verified; !strings.HasPrefix(got, "200 ") {
		t.Errorf("the operator verify answered %s, want 200", got)
	}
	after := verifyGet(t, gw, lateID)
	if after.State != store.StateCompleted || after.Reason != store.ReasonVerified || len(after.Verification.Checks) != 1 {
		t.Errorf("after the check: %+v (%+v), want completed by the check, the release refused", after, after.Verification)
	}
}
