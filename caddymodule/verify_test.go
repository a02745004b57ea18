package caddymodule

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// TestLookupVerdicts: what each answer of the lookup means, and what it
// sends: the route's headers with {env.*} filled in, no redirect followed.
func TestLookupVerdicts(t *testing.T) {
	t.Setenv("LOOKUP_TOKEN", "tok-123")
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		switch r.URL.Query().Get("case") {
		case "found":
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			fmt.Fprint(w, `[{"id":"D-9021"}]`)
		case "empty":
			fmt.Fprint(w, `[]`)
		case "null":
			fmt.Fprint(w, `[{"id":null}]`)
		case "404":
			http.NotFound(w, r)
		case "500":
			http.Error(w, "down", http.StatusInternalServerError)
		case "html":
			fmt.Fprint(w, `<html>not json</html>`)
		case "deep":
			fmt.Fprint(w, strings.Repeat("[", 200)+strings.Repeat("]", 200))
		case "large":
			fmt.Fprintf(w, `[{"id":"D-1","pad":%q}]`, strings.Repeat("x", 2000))
		case "redirect":
			http.Redirect(w, r, "/elsewhere?case=found", http.StatusFound)
		case "slow":
			time.Sleep(300 * time.Millisecond)
			fmt.Fprint(w, `[{"id":"D-1"}]`)
		}
	}))
	defer srv.Close()
	t.Setenv("LOOKUP_URL", srv.URL)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String()
	closed.Close()

	rt := &route{Resolved: config.Resolved{Name: "r", MaxResponse: 1000, Verify: &config.VerifyRule{
		Method: "GET", Timeout: 100 * time.Millisecond,
		Headers:     []config.VerifyHeader{{Name: "Authorization", Value: "Bearer {env.LOOKUP_TOKEN}"}},
		FoundStatus: []int{200}, FoundID: "0.id", NotFoundStatus: []int{404}, ReplayStatus: 201,
	}}}
	h := &Handler{}
	for _, tc := range []struct {
		url, verdict string
		status       int
	}{
		{"{env.LOOKUP_URL}/?case=found", store.VerdictApplied, 200},
		{"{env.LOOKUP_URL}/?case=empty", store.VerdictNotApplied, 200},
		{"{env.LOOKUP_URL}/?case=null", store.VerdictNotApplied, 200},
		{"{env.LOOKUP_URL}/?case=404", store.VerdictNotApplied, 404},
		{"{env.LOOKUP_URL}/?case=500", store.VerdictInconclusive, 500},
		{"{env.LOOKUP_URL}/?case=html", store.VerdictInconclusive, 200},
		{"{env.LOOKUP_URL}/?case=deep", store.VerdictInconclusive, 200},
		{"{env.LOOKUP_URL}/?case=large", store.VerdictInconclusive, 200},
		{"{env.LOOKUP_URL}/?case=redirect", store.VerdictInconclusive, 302},
		{"{env.LOOKUP_URL}/?case=slow", store.VerdictError, 0},
		{refused + "/?case=found", store.VerdictError, 0},
		{"{env.LOOKUP_UNSET_VARIABLE}/?case=found", store.VerdictError, 0},
	} {
		entry, res, note := h.lookup(rt, store.Check{Method: "GET", URL: tc.url})
		if entry.Verdict != tc.verdict || entry.Status != tc.status {
			t.Errorf("%s: %s %d (%s), want %s %d", tc.url, entry.Verdict, entry.Status, note, tc.verdict, tc.status)
		}
		if strings.Contains(note, "case=") || strings.Contains(note, srv.URL) {
			t.Errorf("%s: the note shows the URL: %s", tc.url, note)
		}
		if tc.verdict == store.VerdictApplied {
			if res.Status != 201 || string(res.Body) != `[{"id":"D-9021"}]` || res.ExternalID != "D-9021" ||
				res.Header.Get("Content-Type") != "application/json; charset=utf-8" || len(res.Header) != 1 {
				t.Errorf("applied result: %+v", res)
			}
			if gotAuth != "Bearer tok-123" {
				t.Errorf("Authorization sent: %q", gotAuth)
			}
		}
	}
}
