package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// redirectUpstream answers POST /r/{code} with that redirect status
// (Location: the same path with a trailing slash, Retry-After: 3) and does
// nothing else; POST /r/{code}/ creates a deal (201). /fail/{code}
// answers that status with Retry-After: 7.
func redirectUpstream(t *testing.T) (fake, *counter) {
	calls := new(counter)
	f := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := calls.add(r.URL.Path)
		w.Header().Set("Retry-After", "3")
		switch rest, ok := strings.CutPrefix(r.URL.Path, "/r/"); {
		case ok && strings.HasSuffix(rest, "/"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"D-%d"}`, n)
		case ok:
			code, _ := strconv.Atoi(rest)
			w.Header().Set("Location", r.URL.Path+"/")
			w.WriteHeader(code)
		default:
			code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/fail/"))
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(code)
			fmt.Fprintf(w, "status %d, call %d\n", code, n)
		}
	})
	return f, calls
}

const redirectRules = `
routes:
  - name: redirected
    match: { path: /r/* }
    key: ["{header.Idempotency-Key}"]
  - name: fails_release
    match: { path: /fail/500 }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: release
  - name: fails
    match: { path: /fail/* }
    key: ["{header.Idempotency-Key}"]
`

// TestRedirectReleases: a 307 or 308 from the upstream means "send this
// request to another URL": nothing was done here, so the claim is released
// and the redirected request executes under the same key (/r/307/ is the
// same route and key as /r/307). 301, 302 and 303 are results, replayed.
// On every release the upstream's Retry-After reaches the client.
func TestRedirectReleases(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		up, calls := redirectUpstream(t)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: redirectRules})
		for _, code := range []int{307, 308} {
			path := fmt.Sprintf("/r/%d", code)
			// A client that follows redirects, as curl -L and most HTTP
			// libraries do: /r/307/ is the same route and key as /r/307,
			// and executes there, once.
			key := fmt.Sprint("follow-", code)
			done := send(t, "POST", gw.url+path, []byte(`{"a":1}`), "Idempotency-Key", key)
			if done.status != http.StatusCreated || done.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("%s followed: %d replayed=%q %s, want an execution at %s/", path, done.status, done.header.Get("Idempotent-Replayed"), done.body, path)
			}
			again := sendNoFollow(t, "POST", gw.url+path, []byte(`{"a":1}`), "Idempotency-Key", key)
			if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(done.body) {
				t.Errorf("%s after completion: %d replayed=%q %s, want the replay of %s", path, again.status, again.header.Get("Idempotent-Replayed"), again.body, done.body)
			}
			if n, m := calls.count(path), calls.count(path+"/"); n != 1 || m != 1 {
				t.Errorf("upstream calls: %s %d, %s/ %d; want 1 and 1", path, n, path, m)
			}

			// A client that does not follow gets the redirect each time,
			// with the upstream's Retry-After, and it is never replayed.
			key = fmt.Sprint("stay-", code)
			for i := range 2 {
				r := sendNoFollow(t, "POST", gw.url+path, []byte(`{"a":1}`), "Idempotency-Key", key)
				if r.status != code || r.header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("%s, try %d: %d replayed=%q, want the upstream's %d", path, i+1, r.status, r.header.Get("Idempotent-Replayed"), code)
				}
				if got := r.header.Get("Retry-After"); got != "3" {
					t.Errorf("%s: Retry-After %q, want the upstream's 3", path, got)
				}
			}
			if n := calls.count(path); n != 3 {
				t.Errorf("%s reached the upstream %d times, want 3: a redirect is not a result", path, n)
			}
		}
		for _, code := range []int{301, 302, 303} {
			path := fmt.Sprintf("/r/%d", code)
			key := fmt.Sprint("redirect-", code)
			sendNoFollow(t, "POST", gw.url+path, []byte(`{}`), "Idempotency-Key", key)
			r := sendNoFollow(t, "POST", gw.url+path, []byte(`{}`), "Idempotency-Key", key)
			if r.status != code || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("%s retried: %d replayed=%q, want the stored %d", path, r.status, r.header.Get("Idempotent-Replayed"), code)
			}
			if n := calls.count(path); n != 1 {
				t.Errorf("%s reached the upstream %d times, want 1", path, n)
			}
		}
		// Other releases: retry statuses, and a 5xx under on_unknown_outcome: release.
		for _, path := range []string{"/fail/429", "/fail/503", "/fail/500"} {
			key := "release" + path
			for i := range 2 {
				r := send(t, "POST", gw.url+path, []byte(`{}`), "Idempotency-Key", key)
				if r.header.Get("Retry-After") != "7" || r.header.Get("Idempotent-Replayed") != "" {
					t.Errorf("%s, try %d: %d Retry-After %q replayed=%q, want the upstream's answer with Retry-After 7", path, i+1, r.status, r.header.Get("Retry-After"), r.header.Get("Idempotent-Replayed"))
				}
			}
			if n := calls.count(path); n != 2 {
				t.Errorf("%s reached the upstream %d times, want 2", path, n)
			}
		}
	})
}

// noFollow is a client that hands redirects back instead of following them.
var noFollow = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// sendNoFollow is send with a client that does not follow redirects.
func sendNoFollow(t testing.TB, method, url string, body []byte, headers ...string) response {
	t.Helper()
	r, err := do(noFollow, method, url, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}
