package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/redis"
)

// fixture is a console over one embedded store.
type fixture struct {
	t      *testing.T
	s      *redis.Store
	c      *Console
	routes map[string]config.Resolved
	// verify runs the operator's checks (nil: no route can be verified).
	verify func(ctx context.Context, rec *store.Record, act store.Action) (*store.Record, error)
}

// CheckOutcome runs f.verify: the fixture is the live store's
// operator.Actions.
func (f *fixture) CheckOutcome(ctx context.Context, rec *store.Record, act store.Action) (*store.Record, string, error) {
	if f.verify == nil {
		return rec, "", operator.ErrNoVerify
	}
	rec, err := f.verify(ctx, rec, act)
	return rec, "", err
}

// Run refuses: the fixture has no handler chain.
func (f *fixture) Run(_ context.Context, rec *store.Record, _ store.Action) (*store.Record, int, error) {
	return rec, 0, operator.ErrNoChain
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	// A real redis-server: the fixture backdates records in place.
	s, err := redis.Open(redis.Options{Addrs: []string{redistest.Start(t).Addr}, OpTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	f := &fixture{t: t, s: s, routes: map[string]config.Resolved{
		"create_crm_deal": {Name: "create_crm_deal", Operation: "create_crm_deal", ExternalID: "id", TTL: time.Hour, MaxResponse: 1 << 20},
		"refund":          {Name: "refund", Operation: "refund", TTL: time.Hour, Confirm: true},
	}}
	f.c = &Console{
		Actor:  defaultActor,
		key:    []byte("a test key of enough length"),
		logger: zap.NewNop(),
		origin: http.NewCrossOriginProtection(),
		stores: func() []operator.LiveStore {
			return []operator.LiveStore{{Tag: "t1", Store: f.s, Routes: f.routes, Actions: f}}
		},
	}
	return f
}

var idSeq atomic.Int64

func (f *fixture) newID() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", f.t.Name(), idSeq.Add(1)))
	return hex.EncodeToString(sum[:])[:32]
}

// claim makes an in-flight record of route and returns its id and token.
func (f *fixture) claim(route string, lease time.Duration) (string, string) {
	f.t.Helper()
	id, tok := f.newID(), store.NewToken()
	res, err := f.s.Claim(context.Background(), store.ClaimRequest{
		ID: id, Route: route, Operation: route, Fingerprint: "fp-secret-" + id[:6], FingerprintRule: "whole",
		Token: tok, Lease: lease, HoldTTL: time.Hour,
	})
	if err != nil || !res.Claimed {
		f.t.Fatalf("Claim: %+v, %v", res, err)
	}
	return id, tok
}

func (f *fixture) held(route, reason string) string {
	f.t.Helper()
	id, tok := f.claim(route, 30*time.Second)
	if ok, err := f.s.MarkUnknown(context.Background(), id, tok, reason, time.Hour); !ok || err != nil {
		f.t.Fatalf("MarkUnknown: %v, %v", ok, err)
	}
	return id
}

func (f *fixture) completed(route string, res store.Result) string {
	f.t.Helper()
	id, tok := f.claim(route, 30*time.Second)
	if ok, err := f.s.Complete(context.Background(), store.CompleteRequest{Claim: store.ClaimRequest{ID: id, Token: tok}, Result: res, TTL: time.Hour}); !ok || err != nil {
		f.t.Fatalf("Complete: %v, %v", ok, err)
	}
	return id
}

func (f *fixture) released(route string) string {
	f.t.Helper()
	id, tok := f.claim(route, 30*time.Second)
	if ok, err := f.s.Release(context.Background(), id, tok, time.Hour); !ok || err != nil {
		f.t.Fatalf("Release: %v, %v", ok, err)
	}
	return id
}

// setStarted rewrites a record's start time, so that ages differ by more
// than the store clock's millisecond.
func (f *fixture) setStarted(id string, at time.Time) {
	f.t.Helper()
	// The start time is 13 digits at [35:48] of the stored record (see
	// store/blob.go).
	ctx := context.Background()
	stored, err := f.s.Client().Get(ctx, f.s.Key(id)).Result()
	if err != nil || stored[35:48] != fmt.Sprintf("%013d", f.get(id).StartedAt.UnixMilli()) {
		f.t.Fatalf("stored record: %v", err)
	}
	stored = stored[:35] + fmt.Sprintf("%013d", at.UnixMilli()) + stored[48:]
	if err := f.s.Client().Set(ctx, f.s.Key(id), stored, goredis.KeepTTL).Err(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) get(id string) *store.Record {
	f.t.Helper()
	rec, err := f.s.Get(context.Background(), id)
	if err != nil || rec == nil {
		f.t.Fatalf("Get %s: %v, %v", id, rec, err)
	}
	return rec
}

// req is one request to the console, as mounted under /ops/ and signed in
// as user ("" for nobody).
type req struct {
	method, path string
	form         url.Values
	user         string
	header       http.Header
}

func (f *fixture) do(r req) *httptest.ResponseRecorder {
	f.t.Helper()
	var hr *http.Request
	if r.form != nil {
		hr = httptest.NewRequest(r.method, "http://console.test"+r.path, strings.NewReader(r.form.Encode()))
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		hr = httptest.NewRequest(r.method, "http://console.test"+r.path, nil)
	}
	for k, v := range r.header {
		hr.Header[k] = v
	}
	repl := caddy.NewReplacer()
	if r.user != "" {
		repl.Set("http.auth.user.id", r.user)
	}
	hr = hr.WithContext(context.WithValue(hr.Context(), caddy.ReplacerCtxKey, repl))
	w := httptest.NewRecorder()
	if err := f.c.ServeHTTP(w, hr, nil); err != nil {
		f.t.Fatalf("ServeHTTP: %v", err)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		f.t.Fatalf("%s %s: Cache-Control %q, want no-store", r.method, r.path, cc)
	}
	return w
}

var tokenRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// token reads the csrf_token of the record page of id, as user sees it.
func (f *fixture) token(id, user string) string {
	f.t.Helper()
	w := f.do(req{method: "GET", path: "/records/" + id, user: user})
	m := tokenRE.FindStringSubmatch(w.Body.String())
	if m == nil {
		f.t.Fatalf("no csrf_token on the record page: %s", w.Body)
	}
	return html.UnescapeString(m[1])
}

func mustContain(t *testing.T, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("page lacks %q", w)
		}
	}
}

func mustNotContain(t *testing.T, body string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(body, b) {
			t.Errorf("page shows %q", b)
		}
	}
}

func TestQueueOrderAndSummary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now()
	newer := f.held("create_crm_deal", "upstream_5xx")
	older := f.held("create_crm_deal", "lease_expired")
	f.setStarted(newer, now.Add(-5*time.Minute))
	f.setStarted(older, now.Add(-3*time.Hour))
	done := f.completed("create_crm_deal", store.Result{Status: 201, Body: []byte(`{"id":"D-1"}`)})
	rel := f.released("refund")
	flying, _ := f.claim("refund", time.Minute)

	w := f.do(req{method: "GET", path: "/", user: "alice"})
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("queue: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
	body := w.Body.String()
	pos := func(id string) int {
		i := strings.Index(body, "records/"+id)
		if i < 0 {
			t.Fatalf("record %s is not in the queue", id)
		}
		return i
	}
	order := []string{older, newer, flying, rel, done}
	for i := 1; i < len(order); i++ {
		if pos(order[i-1]) > pos(order[i]) {
			t.Errorf("queue order: %s listed after %s; want held (oldest first), in flight, released, completed", order[i-1], order[i])
		}
	}
	mustContain(t, body,
		"Signed in as <strong>alice</strong>",
		"3 h 0 min", "5 min", // ages
		"the call&#39;s lease ran out without a result", "the upstream answered with a server error (5xx) after it had the request",
		"look it up there, then Complete", // the safe next step in words
		`<span class="tag held">2</span>`, // held count of create_crm_deal
	)
	// The summary puts the route with held records first.
	if strings.Index(body, `href="?route=create_crm_deal"`) > strings.Index(body, `href="?route=refund"`) {
		t.Errorf("summary: create_crm_deal (2 held) is not first")
	}
	mustNotContain(t, body, "fp-secret-", "Not signed in")
}

func TestQueueFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	heldDeal := f.held("create_crm_deal", "upstream_5xx")
	heldRefund := f.held("refund", "upstream_error")
	done := f.completed("create_crm_deal", store.Result{Status: 200})

	for _, tc := range []struct {
		query      string
		want, lack []string
	}{
		{"?state=completed", []string{done}, []string{heldDeal, heldRefund}},
		{"?state=outcome_unknown", []string{heldDeal, heldRefund}, []string{done}},
		{"?route=refund", []string{heldRefund}, []string{heldDeal, done}},
		{"?state=outcome_unknown&route=create_crm_deal", []string{heldDeal}, []string{heldRefund, done}},
		{"?state=released", nil, []string{heldDeal, heldRefund, done}},
	} {
		w := f.do(req{method: "GET", path: "/" + tc.query, user: "alice"})
		if w.Code != 200 {
			t.Fatalf("%s: %d", tc.query, w.Code)
		}
		// The rows only: the summary links routes, not records.
		for _, id := range tc.want {
			if !strings.Contains(w.Body.String(), "records/"+id) {
				t.Errorf("%s: %s missing", tc.query, id)
			}
		}
		for _, id := range tc.lack {
			if strings.Contains(w.Body.String(), "records/"+id) {
				t.Errorf("%s: %s listed", tc.query, id)
			}
		}
	}
	if w := f.do(req{method: "GET", path: "/?state=done", user: "alice"}); w.Code != 400 {
		t.Errorf("unknown state: %d", w.Code)
	}
	if w := f.do(req{method: "GET", path: "/?cursor=garbage", user: "alice"}); w.Code != 400 {
		t.Errorf("bad cursor: %d", w.Code)
	}
}

var rowRE = regexp.MustCompile(`class="rid" href="\./records/([0-9a-f]{32})"`)
var nextRE = regexp.MustCompile(`href="(\?[^"]*cursor=[^"]*)" rel="next"`)

func TestQueuePagination(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 2*queuePageSize + 7
	want := map[string]bool{}
	for range n {
		want[f.held("create_crm_deal", "upstream_5xx")] = true
	}
	f.completed("create_crm_deal", store.Result{Status: 200})
	seen := map[string]bool{}
	path, pages := "/?state=outcome_unknown", 0
	for ; path != "" && pages < 10; pages++ {
		w := f.do(req{method: "GET", path: path, user: "alice"})
		rows := rowRE.FindAllStringSubmatch(w.Body.String(), -1)
		if len(rows) > queuePageSize {
			t.Fatalf("page %d has %d rows", pages, len(rows))
		}
		for _, m := range rows {
			if seen[m[1]] {
				t.Fatalf("record %s listed twice", m[1])
			}
			seen[m[1]] = true
		}
		path = ""
		if m := nextRE.FindStringSubmatch(w.Body.String()); m != nil {
			path = "/" + html.UnescapeString(m[1])
		}
	}
	if len(seen) != n {
		t.Fatalf("pages listed %d held records, want %d", len(seen), n)
	}
	for id := range seen {
		if !want[id] {
			t.Fatalf("listed %s, which is not held", id)
		}
	}
	t.Logf("%d held records over %d pages", n, pages)
}

func TestRecordPageRedacts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.completed("create_crm_deal", store.Result{
		Status: 201,
		Header: http.Header{
			"Content-Type":    {"application/json"},
			"Set-Cookie":      {"session=cookie-secret-1; HttpOnly", "b=cookie-secret-2"},
			"X-Api-Key":       {"key-secret-3"},
			"Idempotency-Key": {"evt_184:create_crm_deal"},
			"Location":        {"/crm/deals/D-9021"},
		},
		Body:       []byte(`{"id":"D-9021","access_token":"tok-secret-4","nested":{"password":"pw-secret-5","keep":[1,2]}}`),
		ExternalID: "D-9021",
	})
	w := f.do(req{method: "GET", path: "/records/" + id, user: "alice"})
	if w.Code != 200 {
		t.Fatalf("record page: %d %s", w.Code, w.Body)
	}
	body := w.Body.String()
	mustContain(t, body, "D-9021", "/crm/deals/D-9021", "[redacted]", "2 credential-like values redacted", `&#34;keep&#34;: [`)
	mustNotContain(t, body, "cookie-secret", "key-secret", "evt_184", "tok-secret", "pw-secret", "fp-secret-", f.get(id).Token)
}

func TestReleaseFromTheConsole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.held("create_crm_deal", "upstream_5xx")
	w := f.do(req{method: "POST", path: "/records/" + id + "/release", user: "alice", form: url.Values{
		"csrf_token": {f.token(id, "alice")}, "reason": {"The CRM has no deal\r\nfor evt_184"},
	}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../records/"+id+"?done=release" {
		t.Fatalf("release: %d Location %q %s", w.Code, w.Header().Get("Location"), w.Body)
	}
	rec := f.get(id)
	if rec.State != store.StateReleased || len(rec.Audit) != 1 || rec.Audit[0].Actor != "alice" ||
		rec.Audit[0].Action != "release" || rec.Audit[0].Reason != "The CRM has no deal\nfor evt_184" {
		t.Fatalf("record after the release: %+v", rec)
	}
	page := f.do(req{method: "GET", path: "/records/" + id + "?done=release", user: "alice"}).Body.String()
	mustContain(t, page, "Released by alice", "Reason: The CRM has no deal\nfor evt_184", "Released.", `<span class="tag released">Released</span>`)

	// Whatever an operator types is shown as text.
	f.do(req{method: "POST", path: "/records/" + id + "/release", user: "alice", form: url.Values{
		"csrf_token": {f.token(id, "alice")}, "reason": {`<script>alert(1)</script>`},
	}})
	page = f.do(req{method: "GET", path: "/records/" + id, user: "alice"}).Body.String()
	mustContain(t, page, "Reason: &lt;script&gt;alert(1)&lt;/script&gt;")
	mustNotContain(t, page, "<script>")
}

func TestCompleteFromTheConsole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.held("create_crm_deal", "upstream_error")
	const body = "{\r\n  \"id\": \"D-9021\"\r\n}"
	w := f.do(req{method: "POST", path: "/records/" + id + "/complete", user: "bob", form: url.Values{
		"csrf_token": {f.token(id, "bob")}, "reason": {"deal D-9021 exists"},
		"status": {"201"}, "content_type": {"application/json"}, "body": {body},
	}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("complete: %d %s", w.Code, w.Body)
	}
	rec := f.get(id)
	if rec.State != store.StateCompleted || rec.Status != 201 || string(rec.Body) != "{\n  \"id\": \"D-9021\"\n}" ||
		rec.ExternalID != "D-9021" || rec.Header.Get("Content-Type") != "application/json" ||
		len(rec.Audit) != 1 || rec.Audit[0].Actor != "bob" || rec.Audit[0].Action != "complete" {
		t.Fatalf("record after the complete: %+v", rec)
	}
	// A retry replays it.
	res, err := f.s.Claim(context.Background(), store.ClaimRequest{
		ID: id, Route: "create_crm_deal", Operation: "create_crm_deal", Fingerprint: "fp-secret-" + id[:6],
		FingerprintRule: "whole", Token: store.NewToken(), Lease: time.Second, HoldTTL: time.Hour,
	})
	if err != nil || res.Claimed || res.Record.Status != 201 || res.Record.Executions != 1 {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	// Completing it again is a conflict, shown on the page.
	w = f.do(req{method: "POST", path: "/records/" + id + "/complete", user: "bob", form: url.Values{
		"csrf_token": {f.token(id, "bob")}, "reason": {"again"}, "status": {"200"},
	}})
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "the record changed meanwhile") {
		t.Fatalf("second complete: %d %s", w.Code, w.Body)
	}
}

func TestActionsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.held("create_crm_deal", "upstream_5xx")
	before := f.get(id)
	tok := f.token(id, "alice")
	for _, tc := range []struct {
		name string
		r    req
		code int
		msg  string
	}{
		{"no token", req{form: url.Values{"reason": {"r"}}, user: "alice"}, 403, "carries no csrf_token"},
		{"another user's token", req{form: url.Values{"reason": {"r"}, "csrf_token": {tok}}, user: "mallory"}, 403, "not valid"},
		{"tampered token", req{form: url.Values{"reason": {"r"}, "csrf_token": {tok + "x"}}, user: "alice"}, 403, "not valid"},
		{"cross-site fetch", req{form: url.Values{"reason": {"r"}, "csrf_token": {tok}}, user: "alice",
			header: http.Header{"Sec-Fetch-Site": {"cross-site"}}}, 403, "another site"},
		{"foreign origin", req{form: url.Values{"reason": {"r"}, "csrf_token": {tok}}, user: "alice",
			header: http.Header{"Origin": {"https://evil.example"}}}, 403, "another site"},
		{"no reason", req{form: url.Values{"reason": {"  "}, "csrf_token": {tok}}, user: "alice"}, 400, "Give a reason"},
	} {
		tc.r.method, tc.r.path = "POST", "/records/"+id+"/release"
		w := f.do(tc.r)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.msg) {
			t.Errorf("%s: %d, want %d with %q: %s", tc.name, w.Code, tc.code, tc.msg, w.Body)
		}
	}
	for _, tc := range []struct {
		name string
		form url.Values
		msg  string
	}{
		{"bad status", url.Values{"status": {"99"}}, "final HTTP status"},
		{"body on 204", url.Values{"status": {"204"}, "body": {"x"}}, "has no body"},
		{"control characters in the external id", url.Values{"status": {"200"}, "external_id": {"a\x01"}}, "external id"},
	} {
		tc.form.Set("csrf_token", tok)
		tc.form.Set("reason", "r")
		w := f.do(req{method: "POST", path: "/records/" + id + "/complete", user: "alice", form: tc.form})
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), tc.msg) {
			t.Errorf("%s: %d %s", tc.name, w.Code, w.Body)
		}
	}
	if after := f.get(id); after.State != before.State || len(after.Audit) != 0 {
		t.Fatalf("a refused action changed the record: %+v", after)
	}
	// Same-origin browser requests pass the origin check.
	w := f.do(req{method: "POST", path: "/records/" + id + "/release", user: "alice",
		form:   url.Values{"reason": {"ok"}, "csrf_token": {tok}},
		header: http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {"http://console.test"}}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("same-origin release: %d %s", w.Code, w.Body)
	}
}

func TestConfirmRouteAsksTwice(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.held("refund", "upstream_5xx")
	form := url.Values{"csrf_token": {f.token(id, "alice")}, "reason": {"refund R-1 not in the ledger"}}
	w := f.do(req{method: "POST", path: "/records/" + id + "/release", user: "alice", form: form})
	if w.Code != 200 {
		t.Fatalf("first step: %d %s", w.Code, w.Body)
	}
	mustContain(t, w.Body.String(), "Release this record?", `name="confirmed" value="yes"`,
		`value="refund R-1 not in the ledger"`, "Nothing has changed yet")
	if rec := f.get(id); rec.State != store.StateUnknown {
		t.Fatalf("the first step acted: %+v", rec)
	}
	form.Set("confirmed", "yes")
	if w := f.do(req{method: "POST", path: "/records/" + id + "/release", user: "alice", form: form}); w.Code != http.StatusSeeOther {
		t.Fatalf("confirmed: %d %s", w.Code, w.Body)
	}
	if rec := f.get(id); rec.State != store.StateReleased || len(rec.Audit) != 1 {
		t.Fatalf("after the confirmation: %+v", rec)
	}
}

func TestPagesAndHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.held("create_crm_deal", "upstream_5xx")
	live, _ := f.claim("create_crm_deal", time.Minute)
	for _, tc := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"GET", "/", 200, "Queue"},
		{"HEAD", "/", 200, ""},
		{"GET", "/static/console.css", 200, "--accent"},
		{"GET", "/records/" + id, 200, "Held: outcome unknown"},
		{"GET", "/records/" + live, 200, "The call is still running"},
		{"GET", "/records/0123456789abcdef0123456789abcdef", 404, "No such record"},
		{"GET", "/records/NOT-AN-ID", 400, "Not a record"},
		{"GET", "/nowhere", 404, "Not found"},
		{"POST", "/", 405, "GET only"},
		{"GET", "/records/" + id + "/release", 405, "POST only"},
	} {
		w := f.do(req{method: tc.method, path: tc.path, user: "alice"})
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%s %s: %d, want %d with %q", tc.method, tc.path, w.Code, tc.code, tc.want)
		}
		for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy", "X-Frame-Options"} {
			if w.Header().Get(h) == "" {
				t.Errorf("%s %s: no %s", tc.method, tc.path, h)
			}
		}
	}
	// Links are relative to the page, so the console works under any
	// mount path.
	page := f.do(req{method: "GET", path: "/records/" + id, user: "alice"}).Body.String()
	mustContain(t, page, `href="../static/console.css"`, `href="../">`, `action="../records/`+id+`/release"`)
	// Without a signed-in user, pages say so.
	anon := f.do(req{method: "GET", path: "/", user: ""}).Body.String()
	mustContain(t, anon, "Nobody is signed in")
}

// TestActionsNeedAnOperator: an action needs the user that Caddy's
// authentication signed in ({http.auth.user.id}); without one it is
// refused with 403 and a page that says why, and nothing changes, unless
// the console sets allow_anonymous.
func TestActionsNeedAnOperator(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		user      string
		allow     bool
		action    string
		code      int
		wantActor string // "" : refused, the record unchanged
		page      []string
	}{
		{"anonymous release", "", false, actionRelease, http.StatusForbidden, "",
			[]string{"Refused: nobody is signed in", "{http.auth.user.id}", "basic_auth", "allow_anonymous"}},
		{"anonymous complete", "", false, actionComplete, http.StatusForbidden, "",
			[]string{"Refused: nobody is signed in"}},
		{"anonymous verify", "", false, actionVerify, http.StatusForbidden, "",
			[]string{"Refused: nobody is signed in"}},
		{"anonymous release, allow_anonymous", "", true, actionRelease, http.StatusSeeOther, anonymous, nil},
		{"signed-in release", "alice", false, actionRelease, http.StatusSeeOther, "alice", nil},
		{"signed-in complete", "bob", false, actionComplete, http.StatusSeeOther, "bob", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.c.AllowAnonymous = tc.allow
			id := f.held("create_crm_deal", "upstream_5xx")
			page := f.do(req{method: "GET", path: "/records/" + id, user: tc.user}).Body.String()
			if tc.user == "" && !tc.allow {
				mustContain(t, page, "Nobody is signed in", "actions are refused")
			}
			w := f.do(req{method: "POST", path: "/records/" + id + "/" + tc.action, user: tc.user, form: url.Values{
				"csrf_token": {f.token(id, tc.user)}, "reason": {"checked"}, "status": {"201"}, "body": {`{"id":"D-1"}`}}})
			if w.Code != tc.code {
				t.Fatalf("POST %s: %d, want %d: %s", tc.action, w.Code, tc.code, w.Body)
			}
			mustContain(t, w.Body.String(), tc.page...)
			rec := f.get(id)
			switch {
			case tc.wantActor == "" && (rec.State != store.StateUnknown || len(rec.Audit) != 0):
				t.Fatalf("a refused action changed the record: %+v", rec)
			case tc.wantActor != "" && (len(rec.Audit) != 1 || rec.Audit[0].Actor != tc.wantActor):
				t.Fatalf("audit %+v, want one entry by %s", rec.Audit, tc.wantActor)
			}
		})
	}
}

func TestCSRFToken(t *testing.T) {
	t.Parallel()
	c := &Console{key: []byte("0123456789abcdef")}
	now := time.Unix(1_800_000_000, 0)
	tok := c.csrfToken("alice", now)
	for _, tc := range []struct {
		name  string
		token string
		actor string
		at    time.Time
		want  error
	}{
		{"fresh", tok, "alice", now, nil},
		{"an hour later", tok, "alice", now.Add(time.Hour), nil},
		{"past its lifetime", tok, "alice", now.Add(csrfLifetime + time.Second), errOldToken},
		{"from the future", tok, "alice", now.Add(-2 * csrfSkew), errOldToken},
		{"another actor", tok, "bob", now, errBadToken},
		{"empty", "", "alice", now, errNoToken},
		{"no dot", "abc", "alice", now, errBadToken},
		{"another issue time", "1800000001" + tok[strings.Index(tok, "."):], "alice", now, errBadToken},
	} {
		if err := c.checkCSRF(tc.token, tc.actor, tc.at); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	other := &Console{key: []byte("another key, same length")}
	if err := other.checkCSRF(tok, "alice", now); err != errBadToken {
		t.Errorf("another key: %v", err)
	}
}

func TestShowBody(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, 40) + `{"token":"deep-secret"}` + strings.Repeat("}", 40)
	for _, tc := range []struct {
		name, ct, body string
		want, lack     []string
	}{
		{"json laid out in order", "application/json", `{"z":1,"a":[true,null,"x"],"e":{},"l":[]}`,
			[]string{"{\n  \"z\": 1,\n  \"a\": [\n    true,\n    null,\n    \"x\"\n  ],\n  \"e\": {},\n  \"l\": []\n}"}, nil},
		{"json credentials", "application/problem+json; charset=utf-8", `{"refresh_token":"r-secret","Api-Key":"k-secret","items":[{"session_id":"s-secret"}]}`,
			[]string{`"refresh_token": "[redacted]"`, `"Api-Key": "[redacted]"`, `"session_id": "[redacted]"`}, []string{"secret"}},
		{"too deep", "application/json", deep, []string{"nested too deeply"}, []string{"deep-secret"}},
		{"text as is, opted in", "text/plain", "line 1\n<b>2</b>", []string{"line 1\n<b>2</b>"}, nil},
		{"invalid json as text, opted in", "application/json", `{"a":`, []string{`{"a":`}, nil},
		{"ndjson", "application/x-ndjson", "{\"pwd\":\"p-secret\"}\n{\"id\":2}\n", []string{"{\"pwd\":\"[redacted]\"}\n{\"id\":2}\n"}, []string{"secret"}},
	} {
		rec := &store.Record{Result: store.Result{Header: http.Header{"Content-Type": {tc.ct}}, Body: []byte(tc.body)}}
		v := showBody(rec, operator.NewRedactor(nil).WithUnparsed(strings.HasSuffix(tc.name, "opted in")))
		for _, w := range tc.want {
			if !strings.Contains(v.Text, w) {
				t.Errorf("%s: %q lacks %q", tc.name, v.Text, w)
			}
		}
		for _, l := range tc.lack {
			if strings.Contains(v.Text, l) {
				t.Errorf("%s: %q shows %q", tc.name, v.Text, l)
			}
		}
	}
	if v := showBody(&store.Record{Result: store.Result{Body: []byte{0xff, 0, 1}}}, operator.NewRedactor(nil).WithUnparsed(true)); !v.Binary || v.Text != "" {
		t.Errorf("binary body: %+v", v)
	}
	// Without the route's show_unparsed_bodies, XML, multipart, other text
	// and bytes show only as size and digest.
	for _, body := range []string{"<a><password>x-secret</password></a>", "line 1\n<b>2</b>", "\xff\x00\x01"} {
		v := showBody(&store.Record{Result: store.Result{Header: http.Header{"Content-Type": {"application/xml"}}, Body: []byte(body)}}, operator.NewRedactor(nil))
		if want := fmt.Sprintf("%d bytes, sha256 %x", len(body), sha256.Sum256([]byte(body))); v.Unparsed != want || v.Text != "" || v.Binary {
			t.Errorf("unparsed body %q: %+v, want only %q", body, v, want)
		}
	}
	big := showBody(&store.Record{Result: store.Result{Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte(strings.Repeat("é", maxShownBody))}}, operator.NewRedactor(nil).WithUnparsed(true))
	if !big.Truncated || len(big.Text) > maxShownBody {
		t.Errorf("large body: truncated %v, %d bytes shown", big.Truncated, len(big.Text))
	}
}

func TestSensitiveName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Set-Cookie": true, "Cookie": true, "Authorization": true, "Proxy-Authorization": true,
		"X-Api-Key": true, "Idempotency-Key": true, "X-Auth-Token": true, "X-CSRF-Token": true,
		"access_token": true, "clientSecret": true, "password": true, "X-Amz-Security-Token": true,
		"X-Hub-Signature-256": true, "x-xsrf": true, "privateKey": true,
		"Content-Type": false, "Location": false, "Keep-Alive": false, "X-Request-Id": false,
		"author": true, "id": false, "WWW-Authenticate": true, "monkeys": false,
	} {
		if got := sensitiveName(name); got != want {
			t.Errorf("sensitiveName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestAdviceOnExecutions(t *testing.T) {
	t.Parallel()
	now := time.Now()
	done := func(exe int64, audit ...store.AuditEntry) *store.Record {
		return &store.Record{State: store.StateCompleted, Result: store.Result{Status: 201}, Executions: exe, Attempts: 3, Audit: audit}
	}
	rel := store.AuditEntry{Action: store.AuditRelease, Actor: "alice"}
	for _, tc := range []struct {
		name  string
		rec   *store.Record
		alarm bool
		next  string
	}{
		{"once", done(1), false, "Nothing to do."},
		{"twice, trail not read (queue)", done(2), true, "called 2 times"},
		{"twice, no release on the trail", done(2, store.AuditEntry{Action: store.AuditComplete}), true, "check the upstream for duplicates"},
		{"twice after a release", done(2, rel), false, "each extra call after an operator's release"},
		{"three times after one release", done(3, rel), true, "called 3 times"},
	} {
		a := adviceFor(tc.rec, now)
		if a.Alarm != tc.alarm || !strings.Contains(a.Next, tc.next) {
			t.Errorf("%s: alarm %v, next %q; want alarm %v and %q", tc.name, a.Alarm, a.Next, tc.alarm, tc.next)
		}
	}
}

// TestAdviceOnReleases: Run now is offered, and "known not to have taken
// effect" said, only where the operation is known not done; a record
// that on_unknown_outcome: release let go, or whose budget unknown
// outcomes used in part, says the upstream may have acted.
func TestAdviceOnReleases(t *testing.T) {
	t.Parallel()
	now := time.Now()
	rt := config.Resolved{KeepRequest: true}
	released := func(reason string, unknowns int64) *store.Record {
		return &store.Record{ID: "r1", Route: "crm", State: store.StateReleased, Reason: reason, Unknowns: unknowns, NotDone: 1, Request: []byte("sealed")}
	}
	exhausted := &store.Record{ID: "r2", Route: "crm", State: store.StateUnknown, Reason: store.ReasonRetriesExhausted,
		NotDone: 3, Unknowns: 2, Request: []byte("sealed")}
	for _, tc := range []struct {
		name   string
		rec    *store.Record
		canRun bool
		says   string
	}{
		{"not done", released(store.ReasonNotDone, 0), true, "known not to have taken effect"},
		{"operator", released(store.ReasonOperator, 0), true, "Released by an operator"},
		{"verification", released(store.ReasonVerifiedNotApplied, 0), true, "verification checks found nothing"},
		{"let go by on_unknown_outcome", released(store.ReasonUnknownReleased, 1), false, "the upstream may have acted"},
		{"not done after an unknown let go", released(store.ReasonNotDone, 1), false, "the upstream may have acted"},
		{"released before reasons", released("", 0), false, "the upstream may have acted"},
		{"budget used partly by unknowns", exhausted, false, "the upstream may have acted"},
	} {
		a := adviceFor(tc.rec, now)
		if got := canRun(tc.rec, rt, true, now); got != tc.canRun {
			t.Errorf("%s: canRun %v, want %v", tc.name, got, tc.canRun)
		}
		all := a.Known + " " + a.Next + " " + a.Attempt
		if !strings.Contains(all, tc.says) || !tc.canRun && (strings.Contains(all, "known not to have taken effect") || strings.Contains(all, "or Run now") ||
			strings.Contains(all, "Run now sends") || strings.Contains(all, "Run now (")) {
			t.Errorf("%s: advice %q; want %q, and Run now offered only when it may run", tc.name, all, tc.says)
		}
	}
}

// TestRecordPageRedactsEveryBody: the record page hides credential-like
// values in JSON bodies whatever their Content-Type (a UTF-8 BOM
// allowed) and in URL-encoded forms, as the admin API does (one
// redaction: operator.Service); the route's redact_fields add names.
func TestRecordPageRedactsEveryBody(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rt := f.routes["create_crm_deal"]
	rt.RedactFields = []string{"card_number"}
	f.routes["create_crm_deal"] = rt
	for _, tc := range []struct {
		name, ct, body, keep string
	}{
		{"json as text/plain", "text/plain", `{"id":"D-2","client_secret":"s-secret-1"}`, "D-2"},
		{"json with a BOM", "application/json", "\ufeff" + `{"id":"D-3","access_token":"t-secret-2"}`, "D-3"},
		{"url-encoded form", "application/x-www-form-urlencoded", `access_token=t-secret-3&expires_in=3600`, "expires_in=3600"},
		{"redact_fields", "application/json", `{"id":"D-4","card_number":"4111-secret-4"}`, "D-4"},
		{"ndjson", "application/x-ndjson", "{\"id\":\"D-5\"}\n{\"pwd\":\"p-secret-5\"}\n", "D-5"},
		{"xssi prefix", "application/json", ")]}'\n{\"id\":\"D-6\",\"accessKeyId\":\"a-secret-6\"}", "D-6"},
		{"json in a json string", "application/json", `{"id":"D-7","payload":"{\"client_assertion\":\"c-secret-7\"}"}`, "D-7"},
		{"; separated form", "application/x-www-form-urlencoded", `id=D-8;password=p-secret-8`, "id=D-8"},
	} {
		id := f.completed("create_crm_deal", store.Result{Status: 200, Header: http.Header{"Content-Type": {tc.ct}}, Body: []byte(tc.body)})
		page := f.do(req{method: "GET", path: "/records/" + id, user: "alice"}).Body.String()
		if strings.Contains(page, "secret-") || !strings.Contains(page, operator.Redacted) || !strings.Contains(page, tc.keep) {
			t.Errorf("%s: the record page shows the credential or lost %q", tc.name, tc.keep)
		}
	}
	// XML is shown only as its size and digest, unless the route sets
	// show_unparsed_bodies.
	const xml = "<deal><id>D-9</id><password>x-secret-9</password></deal>"
	id := f.completed("create_crm_deal", store.Result{Status: 200, Header: http.Header{"Content-Type": {"application/xml"}}, Body: []byte(xml)})
	digest := fmt.Sprintf("%d bytes, sha256 %x", len(xml), sha256.Sum256([]byte(xml)))
	if page := f.do(req{method: "GET", path: "/records/" + id, user: "alice"}).Body.String(); strings.Contains(page, "secret-") || !strings.Contains(page, digest) {
		t.Errorf("xml: the record page shows the body, or not %q", digest)
	}
	rt.ShowUnparsedBodies = true
	f.routes["create_crm_deal"] = rt
	if page := f.do(req{method: "GET", path: "/records/" + id, user: "alice"}).Body.String(); !strings.Contains(page, html.EscapeString(xml)) || strings.Contains(page, digest) {
		t.Errorf("xml with show_unparsed_bodies: the record page does not show the body as stored")
	}
}

// TestToolCallShown: a held MCP tool call's queue row names its tool,
// and its record page names the tool and shows its arguments with the
// credential-like fields and the route's redact_fields redacted, also a
// field the route came to name after the call was stored; the queue row
// of another route names none.
func TestToolCallShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.routes["crm_tools"] = config.Resolved{Name: "crm_tools", Operation: "crm_tools", TTL: time.Hour, RedactFields: []string{"customer_note"}}
	id, tok := f.newID(), store.NewToken()
	// Stored before the route named customer_note: redacted for the page.
	call := operator.NewRedactor(nil).ToolCall("create_deal", []byte(`{"event_id":"evt_8812","name":"Acme renewal","password":"pw-secret-1",`+
		`"auth":{"api_key":"key-secret-2"},"customer_note":"note-secret-3"}`))
	ctx := context.Background()
	res, err := f.s.Claim(ctx, store.ClaimRequest{ID: id, Route: "crm_tools", Operation: "crm_tools", Fingerprint: "fp-secret-" + id[:6],
		FingerprintRule: "whole", Token: tok, Lease: 30 * time.Second, HoldTTL: time.Hour, Call: call})
	if err != nil || !res.Claimed {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	if ok, err := f.s.MarkUnknown(ctx, id, tok, "upstream_reset", time.Hour); !ok || err != nil {
		t.Fatalf("MarkUnknown: %v, %v", ok, err)
	}
	plain := f.held("create_crm_deal", "upstream_5xx")

	queue := f.do(req{method: "GET", path: "/", user: "alice"}).Body.String()
	mustContain(t, queue, `<span class="tool">tool <code>create_deal</code></span>`)
	if strings.Count(queue, `class="tool"`) != 1 || !strings.Contains(queue, "records/"+plain) {
		t.Errorf("the queue names a tool on the row of another route:\n%s", queue)
	}
	mustNotContain(t, queue, "pw-secret", "key-secret", "note-secret")

	w := f.do(req{method: "GET", path: "/records/" + id, user: "alice"})
	if w.Code != 200 {
		t.Fatalf("record page: %d %s", w.Code, w.Body)
	}
	page := w.Body.String()
	mustContain(t, page, `<h2 id="call-h">Tool call</h2>`, `<code class="tool-name">create_deal</code>`,
		`&#34;event_id&#34;: &#34;evt_8812&#34;`, `&#34;password&#34;: &#34;[redacted]&#34;`,
		`&#34;auth&#34;: &#34;[redacted]&#34;`, `&#34;customer_note&#34;: &#34;[redacted]&#34;`)
	mustNotContain(t, page, "pw-secret", "key-secret", "note-secret", "fp-secret-")

	other := f.do(req{method: "GET", path: "/records/" + plain, user: "alice"}).Body.String()
	mustNotContain(t, other, `id="call-h"`)
}
