package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"
)

// consoleRules are the routes of the console test: two that a first
// failure holds, one of them asking operators to confirm, and one that
// completes.
const consoleRules = `
routes:
  - name: create_crm_deal
    match: { methods: [POST], path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
  - name: refund_payment
    match: { methods: [POST], path: /payments/*/refund }
    key: ["{header.Idempotency-Key}"]
    confirm: true
  - name: send_invoice
    match: { methods: [POST], path: /invoices }
    key: ["{header.Idempotency-Key}"]
    external_id: invoice_id
`

// crm is an upstream whose first call for each key fails with a 500 after
// it got the request (so the gateway holds the operation) and whose later
// calls succeed. It counts the calls per key.
type crm struct {
	fake
	calls counter
}

func newCRM(t *testing.T) *crm {
	c := &crm{}
	c.fake = startFake(t, c.serve)
	return c
}

func (c *crm) count(key string) int { return c.calls.count(key) }

func (c *crm) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := forwardedKey(r)
	n, _ := c.calls.add(key)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/invoices":
		w.Header().Set("Set-Cookie", "crm_session=s3cr3t-cookie; Path=/; HttpOnly")
		w.Header().Set("X-Upstream-Token", "s3cr3t-token")
		w.Header().Set("Location", "/invoices/INV-501")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"invoice_id":"INV-501","amount":"120.00","currency":"EUR","access_token":"s3cr3t-body-token"}`)
	case n == 1:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":"upstream timeout while saving"}`)
	default:
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"D-%d","call":%d}`, 9020+n, n)
	}
}

// chromium finds the browser, or skips (fails under
// IDEMGATE_REQUIRE_BROWSER=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no chromium on PATH: install it (Debian: apt-get install -y chromium) to run the console's browser test"
	if os.Getenv("IDEMGATE_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + " (IDEMGATE_REQUIRE_BROWSER=1)")
	}
	t.Skip(msg + "; IDEMGATE_REQUIRE_BROWSER=1 makes this a failure")
	return ""
}

// consoleGateway runs the gateway with the guarded API on one port and the
// console under /ops/ behind basic_auth on another.
type consoleGateway struct {
	*gateway
	console string // http://127.0.0.1:port/ops/
}

func startConsoleGateway(t *testing.T, upstream, user, password string) *consoleGateway {
	t.Helper()
	site, console := authedConsole(t, user, password)
	g := startGateway(t, gatewayConfig{store: "embedded", upstream: upstream, rules: consoleRules, sites: site})
	return &consoleGateway{gateway: g, console: console}
}

// authedConsole is a site block that mounts the console under /ops/
// behind basic_auth for user on a port of its own, and the console's URL.
func authedConsole(t *testing.T, user, password string) (site, console string) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	return consoleSite(port, "basic_auth {\n\t\t\t"+user+" "+string(hash)+"\n\t\t}", ""),
		fmt.Sprintf("http://127.0.0.1:%d/ops/", port)
}

// heldRecord sends one request that the upstream fails, then its retry,
// which the gateway answers 409 "outcome unknown" naming the record.
func heldRecord(t *testing.T, g *consoleGateway, path, key string) string {
	t.Helper()
	body := []byte(`{"customer_id":"C-17","amount":"120.00","currency":"EUR"}`)
	if r := send(t, "POST", g.url+path, body, "Idempotency-Key", key, "Content-Type", "application/json"); r.status != 500 {
		t.Fatalf("first %s: %d %s, want the upstream's 500", path, r.status, r.body)
	}
	r := send(t, "POST", g.url+path, body, "Idempotency-Key", key, "Content-Type", "application/json")
	return heldID(t, r, "retry of "+path)
}

// browser drives one headless chromium tab through the console.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string // where screenshots go
}

// newBrowser opens a tab that signs in as user with basic auth (nobody
// when user is "").
func newBrowser(t *testing.T, exe, user, password string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(cancelTab)
	b := &browser{t: t, ctx: ctx, shots: t.TempDir()}
	if user == "" {
		// Nobody signs in.
		b.do(chromedp.EmulateViewport(1280, 900))
		return b
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": auth},
		})
		return err
	}), chromedp.EmulateViewport(1280, 900))
	return b
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

// text is the visible text of the page.
func (b *browser) text() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		b.t.Fatalf("browser: reading the page: %v", err)
	}
	return s
}

// shot saves a full-page PNG screenshot as name.png and returns its path.
// With IDEMGATE_SCREENSHOT_DIR set, a copy goes there too.
func (b *browser) shot(name string) string {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	if dir := os.Getenv("IDEMGATE_SCREENSHOT_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
	b.t.Logf("screenshot %s (%d bytes)", path, len(png))
	return path
}

func mustSee(t *testing.T, page string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(page, w) {
			t.Fatalf("the page does not show %q:\n%s", w, page)
		}
	}
}

// TestConsoleInBrowser resolves held operations through the console in a
// real headless Chromium against the real binary: Release, Complete, a
// route that asks twice, and a form POST without its token.
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	const user, password = "alice", "correct horse battery staple"
	up := newCRM(t)
	g := startConsoleGateway(t, up.addr(), user, password)

	dealA := heldRecord(t, g, "/crm/deals", "evt_184:create_crm_deal")
	dealB := heldRecord(t, g, "/crm/deals", "evt_185:create_crm_deal")
	refund := heldRecord(t, g, "/payments/P-77/refund", "refund-P-77")
	inv := []byte(`{"customer_id":"C-17","amount":"120.00"}`)
	if r := send(t, "POST", g.url+"/invoices", inv, "Idempotency-Key", "inv-501"); r.status != 201 {
		t.Fatalf("invoice: %d %s", r.status, r.body)
	}
	t.Logf("held: %s (deal A), %s (deal B), %s (refund, confirm route); upstream calls so far A=%d B=%d",
		dealA, dealB, refund, up.count("evt_184:create_crm_deal"), up.count("evt_185:create_crm_deal"))

	b := newBrowser(t, exe, user, password)

	// The queue: held records first, each with what to do.
	b.do(chromedp.Navigate(g.console), chromedp.WaitVisible(chromedp.CSS(".queue")))
	page := b.text()
	mustSee(t, page, "Signed in as alice", "create_crm_deal", "refund_payment", "send_invoice",
		dealA[:12], dealB[:12], refund[:12], "Held", "look it up there, then Complete")
	items, err := chromedp.Run(b.ctx, chromedp.AttributesAll(chromedp.CSSAll(".queue .item")))
	if err != nil {
		t.Fatal(err)
	}
	var classes []string
	for _, it := range items {
		classes = append(classes, it["class"])
	}
	if got := strings.Join(classes, ", "); got != "item held, item held, item held, item completed" {
		t.Fatalf("queue rows: %s, want the three held records first", got)
	}
	b.shot("console-queue-start")

	// Release deal A with a reason.
	b.do(chromedp.Click(chromedp.CSS(`a.rid[href$="`+dealA+`"]`)), chromedp.WaitVisible(chromedp.CSS("#release-h")))
	mustSee(t, b.text(), "Held: outcome unknown", "2 attempts", "1 execution", "Safe next step")
	b.shot("console-record-held")
	const why = "Checked the CRM: no deal for evt_184, safe to run again"
	b.do(
		chromedp.SetValue(chromedp.ID("r-reason"), why),
		chromedp.Click(chromedp.CSS(`form[action$="/release"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(".banner.ok")),
	)
	page = b.text()
	mustSee(t, page, "Released.", "Released by alice", "Reason: "+why)
	b.shot("console-record-released")

	// The client's retry executes once; the next one replays it.
	body := []byte(`{"customer_id":"C-17","amount":"120.00","currency":"EUR"}`)
	before := up.count("evt_184:create_crm_deal")
	r := send(t, "POST", g.url+"/crm/deals", body, "Idempotency-Key", "evt_184:create_crm_deal", "Content-Type", "application/json")
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after the release: %d %v %s", r.status, r.header, r.body)
	}
	again := send(t, "POST", g.url+"/crm/deals", body, "Idempotency-Key", "evt_184:create_crm_deal", "Content-Type", "application/json")
	if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(r.body) {
		t.Fatalf("second retry: %d %v %s, want the replay of %s", again.status, again.header, again.body, r.body)
	}
	if n := up.count("evt_184:create_crm_deal") - before; n != 1 {
		t.Fatalf("upstream executions after the release: %d, want 1", n)
	}
	t.Logf("release: the retry executed once (upstream calls for deal A: %d before, %d after), the next was replayed",
		before, up.count("evt_184:create_crm_deal"))

	// The queue now: two still held, and the released deal completed by
	// its retry, with two executions.
	b.do(chromedp.Navigate(g.console), chromedp.WaitVisible(chromedp.CSS(".queue")))
	mustSee(t, b.text(), "2 executions", "each extra call after an operator's release")
	b.shot("console-queue")
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.shot("console-queue-phone")
	b.do(chromedp.EmulateViewport(1280, 900))

	// The admin API shows the same audit entry.
	var view struct {
		Audit []struct{ Actor, Action, Reason string }
	}
	ar := send(t, "GET", g.admin+"/idempotency/records/"+dealA, nil)
	if err := json.Unmarshal(ar.body, &view); err != nil || len(view.Audit) != 1 ||
		view.Audit[0].Actor != user || view.Audit[0].Action != "release" || view.Audit[0].Reason != why {
		t.Fatalf("admin API record view: %v %s", err, ar.body)
	}

	// Complete deal B with the answer found upstream.
	const answer = `{"id":"D-9101","status":"created"}`
	b.do(
		chromedp.Navigate(g.console+"records/"+dealB),
		chromedp.WaitVisible(chromedp.ID("complete-h")),
		chromedp.SetValue(chromedp.ID("c-status"), "201"),
		chromedp.SetValue(chromedp.ID("c-body"), answer),
		chromedp.SetValue(chromedp.ID("c-reason"), "Deal D-9101 exists in the CRM for evt_185"),
		chromedp.Click(chromedp.CSS(`form[action$="/complete"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(".banner.ok")),
	)
	mustSee(t, b.text(), "Completed.", "Completed by alice", "D-9101", "Stored response")
	b.do(chromedp.Click(chromedp.CSS("details.body summary")))
	b.shot("console-record-completed")
	before = up.count("evt_185:create_crm_deal")
	r = send(t, "POST", g.url+"/crm/deals", body, "Idempotency-Key", "evt_185:create_crm_deal", "Content-Type", "application/json")
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || string(r.body) != answer {
		t.Fatalf("retry after the complete: %d %v %s, want the replay of %s", r.status, r.header, r.body, answer)
	}
	if n := up.count("evt_185:create_crm_deal") - before; n != 0 {
		t.Fatalf("upstream executions after the complete: %d, want 0", n)
	}
	t.Logf("complete: the retry replayed %s; upstream calls for deal B stay %d", r.body, before)

	// A route with confirm: true asks a second time.
	b.do(
		chromedp.Navigate(g.console+"records/"+refund),
		chromedp.WaitVisible(chromedp.ID("release-h")),
		chromedp.SetValue(chromedp.ID("r-reason"), "Refund R-77 is not in the ledger"),
		chromedp.Click(chromedp.CSS(`form[action$="/release"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("form.confirm")),
	)
	mustSee(t, b.text(), "Release this record?", "Nothing has changed yet", "Refund R-77 is not in the ledger")
	b.shot("console-confirm")
	if st := recordState(t, g, refund); st != "outcome_unknown" {
		t.Fatalf("the first step released the record: %s", st)
	}
	b.do(
		chromedp.Click(chromedp.CSS(`form.confirm button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(".banner.ok")),
	)
	mustSee(t, b.text(), "Released by alice")
	if st := recordState(t, g, refund); st != "released" {
		t.Fatalf("after the confirmation: %s", st)
	}

	// The stored response is shown with its credentials redacted.
	b.do(chromedp.Navigate(g.console+"?route=send_invoice"), chromedp.WaitVisible(chromedp.CSS(".queue")))
	b.do(chromedp.Click(chromedp.CSS("a.rid")), chromedp.WaitVisible(chromedp.CSS("table.headers")))
	b.do(chromedp.Click(chromedp.CSS("details.body summary")))
	html, err := chromedp.Run(b.ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	mustSee(t, html, "INV-501", "[redacted]", "/invoices/INV-501")
	for _, secret := range []string{"s3cr3t", "inv-501", "evt_18", "Basic "} {
		if strings.Contains(html, secret) {
			t.Fatalf("the record page shows %q", secret)
		}
	}

	// The final queue.
	b.do(chromedp.Navigate(g.console), chromedp.WaitVisible(chromedp.CSS(".queue")))
	b.shot("console-queue-after")

	// A form POST without its token is refused, and so is one from
	// another site; neither changes the record.
	form := url.Values{"reason": {"no token"}}
	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"without the token", nil},
		{"from another site", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}},
	} {
		hdr := append([]string{"Content-Type", "application/x-www-form-urlencoded",
			"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))}, tc.header...)
		r := send(t, "POST", g.console+"records/"+dealB+"/release", []byte(form.Encode()), hdr...)
		if r.status != http.StatusForbidden || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("POST %s: %d %v %s, want 403", tc.name, r.status, r.header, r.body)
		}
		t.Logf("POST %s: %d", tc.name, r.status)
	}
	if st := recordState(t, g, dealB); st != "completed" {
		t.Fatalf("a refused POST changed the record: %s", st)
	}
	// Without credentials, basic_auth answers before the console.
	if r := send(t, "GET", g.console, nil); r.status != http.StatusUnauthorized {
		t.Fatalf("console without credentials: %d", r.status)
	}
	t.Logf("screenshots in %s", b.shots)
}

func recordState(t *testing.T, g *consoleGateway, id string) string {
	t.Helper()
	var v struct{ State string }
	_, b, _ := adminCall(t, g.gateway, http.MethodGet, "/idempotency/records/"+id, "")
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("admin API: %v %s", err, b)
	}
	return v.State
}
