package e2e

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// consoleSite mounts the console under /ops/ on port, with the given
// lines inside its handle_path (before the directive) and options (inside
// its block).
func consoleSite(port int, before, options string) string {
	return fmt.Sprintf(`
:%d {
	handle_path /ops/* {
		%s
		idempotency_console {
			%s
		}
	}
}`, port, before, options)
}

var csrfRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// consolePost GETs the record page of id for its form token, then POSTs
// the release form with reason, as a browser would; header lines are
// sent with both.
func consolePost(t *testing.T, consoleURL, id, reason string, header ...string) response {
	t.Helper()
	page := send(t, "GET", consoleURL+"records/"+id, nil, header...)
	m := csrfRE.FindSubmatch(page.body)
	if page.status != http.StatusOK || m == nil {
		t.Fatalf("record page: %d, csrf token found: %v", page.status, m != nil)
	}
	form := url.Values{"csrf_token": {html.UnescapeString(string(m[1]))}, "reason": {reason}}
	return send(t, "POST", consoleURL+"records/"+id+"/release", []byte(form.Encode()),
		append([]string{"Content-Type", "application/x-www-form-urlencoded"}, header...)...)
}

// TestConsoleNeedsAnOperator: a console mounted without authentication
// shows records but refuses every action with 403 and a page that says
// why, in a real browser and over plain HTTP; the record stays held. A
// console that sets allow_anonymous takes the action, recorded as
// "anonymous". (Behind basic_auth the action is recorded with the user:
// TestConsoleInBrowser.)
//
// Expected: the browser's release ends on "Refused: nobody is signed
// in", the HTTP POST gets 403 with the same page, the record stays
// outcome_unknown with no audit entry; with allow_anonymous the POST
// is taken (303 to the record's page) and the record is released by
// "anonymous".
func TestConsoleNeedsAnOperator(t *testing.T) {
	exe := chromium(t)
	up := newCRM(t)
	port := freePort(t)
	g := &consoleGateway{
		gateway: startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: consoleRules, sites: consoleSite(port, "", "")}),
		console: fmt.Sprintf("http://127.0.0.1:%d/ops/", port),
	}
	id := heldRecord(t, g, "/crm/deals", "evt_184:create_crm_deal")

	b := newBrowser(t, exe, "", "")
	b.do(chromedp.Navigate(g.console+"records/"+id), chromedp.WaitVisible(chromedp.ID("release-h")))
	if page := b.text(); !strings.Contains(page, "Not signed in") || !strings.Contains(page, "actions are refused") {
		t.Errorf("the record page does not say that actions are refused:\n%s", page)
	}
	b.do(
		chromedp.SetValue(chromedp.ID("r-reason"), "anonymous release"),
		chromedp.Click(chromedp.CSS(`form[action$="/release"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(".banner.error, .banner.ok")),
	)
	page := b.text()
	b.shot("console-anonymous-refused")
	mustSee(t, page, "Refused: nobody is signed in", "{http.auth.user.id}", "basic_auth", "allow_anonymous")

	r := consolePost(t, g.console, id, "anonymous release over HTTP")
	if r.status != http.StatusForbidden || !strings.Contains(r.header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(r.body), "Refused: nobody is signed in") {
		t.Fatalf("anonymous POST: %d %q %s, want 403 with the page saying why", r.status, r.header.Get("Content-Type"), r.body)
	}
	var rec adminRecord
	adminJSON(t, g.gateway, http.MethodGet, "/idempotency/records/"+id, "", &rec)
	if rec.State != "outcome_unknown" || len(rec.Audit) != 0 {
		t.Fatalf("after the refused actions: %s, audit %+v; want held, no audit entry", rec.State, rec.Audit)
	}
	t.Logf("anonymous release: browser page %q, HTTP %d; record %s", "Refused: nobody is signed in", r.status, rec.State)

	// A console on a trusted network may let anyone act.
	openPort := freePort(t)
	open := &consoleGateway{
		gateway: startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: consoleRules, sites: consoleSite(openPort, "", "allow_anonymous")}),
		console: fmt.Sprintf("http://127.0.0.1:%d/ops/", openPort),
	}
	id = heldRecord(t, open, "/crm/deals", "evt_185:create_crm_deal")
	// The client follows the console's 303 back to the record's page.
	if r := consolePost(t, open.console, id, "trusted network"); r.status != http.StatusOK || !strings.Contains(string(r.body), "Released by anonymous") {
		t.Fatalf("allow_anonymous POST: %d %s, want the record page after the release", r.status, r.body)
	}
	adminJSON(t, open.gateway, http.MethodGet, "/idempotency/records/"+id, "", &rec)
	if rec.State != "released" || len(rec.Audit) != 1 || rec.Audit[0].Actor != "anonymous" {
		t.Fatalf("allow_anonymous: %s, audit %+v; want released by anonymous", rec.State, rec.Audit)
	}
}
