package verify

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
		case "everything": // an API that ignored the filter
			fmt.Fprint(w, `[{"id":"D-9021","source_key":"evt_1"},{"id":"D-1","source_key":"someone-else"}]`)
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

	rt := &config.Resolved{Name: "r", MaxResponse: 1000, Verify: &config.VerifyRule{
		Method: "GET", Timeout: 100 * time.Millisecond,
		Headers:     []config.VerifyHeader{{Name: "Authorization", Value: "Bearer {env.LOOKUP_TOKEN}"}},
		FoundStatus: []int{200}, FoundID: "0.id", NotFoundStatus: []int{404}, ReplayStatus: 201,
	}}
	v := &Verifier{client: lookupClient}
	for _, tc := range []struct {
		url, verdict string
		status       int
	}{
		{"{env.LOOKUP_URL}/?case=found", store.VerdictApplied, 200},
		{"{env.LOOKUP_URL}/?case=empty", store.VerdictNotApplied, 200},
		{"{env.LOOKUP_URL}/?case=everything", store.VerdictInconclusive, 200},
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
		entry, res, note := v.lookup(rt, store.Check{Method: "GET", URL: tc.url})
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

// TestLookupMatchAndObject: found.match keeps an answer about another
// key from being applied, and found.object is what a retry replays (the
// deal, not the search result around it), with replay_status.
func TestLookupMatchAndObject(t *testing.T) {
	answers := map[string]string{
		"found":      `[{"id":"D-9021","source_key":"evt_1","amount":9900}]`,
		"other":      `[{"id":"D-1","source_key":"someone-else"}]`,
		"no_key":     `[{"id":"D-1"}]`,
		"number":     `[{"id":"D-1","source_key":42}]`,
		"empty":      `[]`,
		"everything": `[{"id":"D-9021","source_key":"evt_1"},{"id":"D-1","source_key":"someone-else"}]`,
		"object":     `{"id":"D-9021","source_key":"evt_1"}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, answers[r.URL.Query().Get("case")])
	}))
	defer srv.Close()

	rt := &config.Resolved{Name: "r", MaxResponse: 1000, Verify: &config.VerifyRule{
		Method: "GET", Timeout: time.Second, FoundStatus: []int{200}, FoundID: "0.id", NotFoundStatus: []int{404},
		ReplayStatus: 201, FoundObject: "0",
	}}
	v := &Verifier{client: lookupClient}
	match := []store.CheckMatch{{Path: "0.source_key", Value: "evt_1"}}
	for _, tc := range []struct {
		answer  string
		match   []store.CheckMatch
		verdict string
		body    string
	}{
		{"found", match, store.VerdictApplied, `{"id":"D-9021","source_key":"evt_1","amount":9900}`},
		{"found", nil, store.VerdictApplied, `{"id":"D-9021","source_key":"evt_1","amount":9900}`},
		{"other", match, store.VerdictInconclusive, ""},
		{"no_key", match, store.VerdictInconclusive, ""},
		{"number", []store.CheckMatch{{Path: "0.source_key", Value: "42"}}, store.VerdictApplied, `{"id":"D-1","source_key":42}`},
		{"empty", match, store.VerdictNotApplied, ""},
		{"everything", match, store.VerdictInconclusive, ""},
		{"everything", nil, store.VerdictInconclusive, ""},
		{"object", nil, store.VerdictNotApplied, ""}, // no "0.id" in an object: nothing found
	} {
		entry, res, note := v.lookup(rt, store.Check{Method: "GET", URL: srv.URL + "/?case=" + tc.answer, Match: tc.match})
		if entry.Verdict != tc.verdict {
			t.Errorf("%s (match %v): %s (%s), want %s", tc.answer, tc.match, entry.Verdict, note, tc.verdict)
			continue
		}
		if tc.verdict != store.VerdictApplied {
			if res.Status != 0 || res.Body != nil {
				t.Errorf("%s: a result for a %s answer: %+v", tc.answer, tc.verdict, res)
			}
			continue
		}
		if res.Status != 201 || string(res.Body) != tc.body || res.ExternalID == "" || res.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: applied result %d %s (external id %q, %v), want 201 %s", tc.answer, res.Status, res.Body, res.ExternalID, res.Header, tc.body)
		}
	}

	// An object path with nothing there: inconclusive, not the whole answer.
	rt.Verify.FoundObject = "0.deal"
	if entry, res, _ := v.lookup(rt, store.Check{Method: "GET", URL: srv.URL + "/?case=found", Match: match}); entry.Verdict != store.VerdictInconclusive || res.Body != nil {
		t.Errorf("object path missing: %s %s, want inconclusive", entry.Verdict, res.Body)
	}
}
