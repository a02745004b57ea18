package adminapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/caddymodule"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
)

const adminTestRules = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
  - name: held
    match: { path: /held }
    key: ["{header.Idempotency-Key}"]
    external_id: id
  - name: retried
    match: { path: /retried }
    key: ["{header.Idempotency-Key}"]
  - name: files
    match: { path: /files }
    key: ["{header.Idempotency-Key}"]
    show_unparsed_bodies: true
  - name: slow
    match: { path: /slow }
    key: ["{header.Idempotency-Key}"]
`

// adminUpstream answers by path and counts calls per path: /held answers
// 500, /retried 503, /files a body that is not UTF-8, /slow waits for
// its gate, everything else 201 with a JSON body.
type adminUpstream struct {
	calls map[string]*atomic.Int64
	gate  chan struct{}
}

var adminBinaryBody = []byte{0xff, 0xfe, 0x00, 'o', 'k', 0x80}

func newAdminUpstream() *adminUpstream {
	u := &adminUpstream{calls: map[string]*atomic.Int64{}, gate: make(chan struct{})}
	for _, p := range []string{"/deals", "/held", "/retried", "/files", "/slow"} {
		u.calls[p] = new(atomic.Int64)
	}
	return u
}

func (u *adminUpstream) count(path string) int64 { return u.calls[path].Load() }

func (u *adminUpstream) next(w http.ResponseWriter, r *http.Request) error {
	n := u.calls[r.URL.Path].Add(1)
	switch r.URL.Path {
	case "/held":
		w.WriteHeader(http.StatusInternalServerError)
		_, err := fmt.Fprintf(w, "boom %d", n)
		return err
	case "/retried":
		w.WriteHeader(http.StatusServiceUnavailable)
		return nil
	case "/files":
		w.Header().Set("Content-Type", "application/octet-stream")
		_, err := w.Write(adminBinaryBody)
		return err
	case "/slow":
		<-u.gate
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Add("Set-Cookie", "a=1")
	w.Header().Add("Set-Cookie", "b=2")
	w.WriteHeader(http.StatusCreated)
	_, err := fmt.Fprintf(w, `{"id":"D-%d"}`, n)
	return err
}

// adminDo runs one request through the module's routes the way Caddy's
// admin endpoint does: the pattern must match, and a returned error must
// be a caddy.APIError, whose status and message are returned. POSTs are
// sent as application/json.
func adminDo(t *testing.T, a *AdminAPI, method, target, body string) (int, []byte) {
	t.Helper()
	ct := ""
	if method == http.MethodPost {
		ct = "application/json"
	}
	code, _, b := adminSend(t, a, method, target, ct, body)
	return code, b
}

// adminSend is adminDo with the request's Content-Type ("" for none); it
// also returns the response's Content-Type.
func adminSend(t *testing.T, a *AdminAPI, method, target, contentType, body string) (int, string, []byte) {
	t.Helper()
	routes := a.Routes()
	if len(routes) != 1 || !strings.HasPrefix(target, routes[0].Pattern) {
		t.Fatalf("routes %+v do not serve %s", routes, target)
	}
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	if err := routes[0].Handler.ServeHTTP(w, req); err != nil {
		var ae caddy.APIError
		if !errors.As(err, &ae) || ae.HTTPStatus == 0 {
			t.Fatalf("%s %s: error %v is not an APIError with a status", method, target, err)
		}
		return ae.HTTPStatus, "application/json", []byte(ae.Error())
	}
	ct := w.Header().Get("Content-Type")
	if ct != "application/json" && !(ct == "application/problem+json" && w.Code >= 400) {
		t.Errorf("%s %s: Content-Type %q", method, target, ct)
	}
	return w.Code, ct, w.Body.Bytes()
}

// adminJSON is adminDo expecting 200, decoding the answer into v.
func adminJSON(t *testing.T, a *AdminAPI, method, target, body string, v any) {
	t.Helper()
	code, b := adminDo(t, a, method, target, body)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, target, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s %s: %v: %s", method, target, err, b)
	}
}

// adminList walks every page of a listing.
func adminList(t *testing.T, a *AdminAPI, query string, limit int) []recordSummary {
	t.Helper()
	var all []recordSummary
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("listing does not end")
		}
		q, _ := url.ParseQuery(query)
		if limit > 0 {
			q.Set("limit", fmt.Sprint(limit))
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page recordList
		adminJSON(t, a, "GET", "/idempotency/records?"+q.Encode(), "", &page)
		if page.Records == nil {
			t.Fatal(`"records" is null, want a list`)
		}
		if limit > 0 && len(page.Records) > limit {
			t.Fatalf("page of %d records, limit %d", len(page.Records), limit)
		}
		all = append(all, page.Records...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}

func routeIDs(recs []recordSummary, route string) []string {
	var ids []string
	for _, r := range recs {
		if route == "" || r.Route == route {
			ids = append(ids, r.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// onlyRecord returns the id of the one record of route.
func onlyRecord(t *testing.T, a *AdminAPI, route string) string {
	t.Helper()
	recs := adminList(t, a, "route="+route, 0)
	if len(recs) != 1 {
		t.Fatalf("route %s: %d records, want 1: %+v", route, len(recs), recs)
	}
	return recs[0].ID
}

// TestAdminRecords lists, shows, releases and completes records in every
// state through the operator API, and checks what the next retry does.
func TestAdminRecords(t *testing.T) {
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			h := newHandler(t, adminTestRules, st.cfg(t))
			a := newAdmin(h)
			up := newAdminUpstream()
			post := func(path, key string) *httptest.ResponseRecorder {
				return serve(h, up.next, "POST", path, `{"n":1}`, "Idempotency-Key", key)
			}
			post("/deals", "d1")
			post("/held", "h1")
			post("/held", "h2")
			post("/retried", "r1")
			post("/files", "f1")
			slowDone := make(chan struct{})
			go func() { defer close(slowDone); post("/slow", "s1") }()
			t.Cleanup(func() {
				select {
				case <-up.gate:
				default:
					close(up.gate)
				}
				<-slowDone
			})
			for len(adminList(t, a, "state=in_flight", 0)) == 0 {
				select {
				case <-slowDone:
					t.Fatal("the gated call finished")
				case <-time.After(10 * time.Millisecond):
				}
			}

			all := adminList(t, a, "", 0)
			if len(all) != 6 {
				t.Fatalf("%d records, want 6: %+v", len(all), all)
			}
			for _, tc := range []struct {
				query  string
				routes []string
			}{
				{"state=completed", []string{"deals", "files"}},
				{"state=outcome_unknown", []string{"held", "held"}},
				{"state=released", []string{"retried"}},
				{"state=in_flight", []string{"slow"}},
				{"route=held", []string{"held", "held"}},
				{"route=held&state=completed", nil},
				{"route=nope", nil},
			} {
				var got []string
				for _, r := range adminList(t, a, tc.query, 0) {
					got = append(got, r.Route)
				}
				slices.Sort(got)
				if !slices.Equal(got, tc.routes) {
					t.Errorf("%s: routes %v, want %v", tc.query, got, tc.routes)
				}
			}

			// A listing never carries bodies or headers.
			_, raw := adminDo(t, a, "GET", "/idempotency/records", "")
			for _, field := range []string{`"body`, `"headers"`, `"token"`, `"fingerprint"`} {
				if strings.Contains(string(raw), field) {
					t.Errorf("listing contains %s: %s", field, raw)
				}
			}

			t.Run("get", func(t *testing.T) {
				var v map[string]any
				adminJSON(t, a, "GET", "/idempotency/records/"+onlyRecord(t, a, "deals"), "", &v)
				if v["state"] != "completed" || v["route"] != "deals" || v["operation"] != "deals" ||
					v["status"] != 201.0 || v["body"] != `{"id":"D-1"}` || v["external_id"] != "D-1" ||
					v["attempts"] != 1.0 || v["executions"] != 1.0 || v["started_at"] == nil || v["completed_at"] == nil || v["lease_until"] != nil {
					t.Errorf("completed record: %v", v)
				}
				sum := sha256.Sum256([]byte(`{"id":"D-1"}`))
				if v["digest"] != hex.EncodeToString(sum[:]) {
					t.Errorf("digest %v", v["digest"])
				}
				hdr, _ := v["headers"].(map[string]any)
				if fmt.Sprint(hdr["Set-Cookie"]) != "[a=[redacted] b=[redacted]]" || fmt.Sprint(hdr["Content-Type"]) != "[application/json]" {
					t.Errorf("headers %v", v["headers"])
				}

				v = nil
				adminJSON(t, a, "GET", "/idempotency/records/"+onlyRecord(t, a, "files"), "", &v)
				b, err := base64.StdEncoding.DecodeString(fmt.Sprint(v["body_base64"]))
				if _, ok := v["body"]; ok || err != nil || string(b) != string(adminBinaryBody) {
					t.Errorf("binary body: body=%v body_base64=%v", v["body"], v["body_base64"])
				}

				var rec recordView
				adminJSON(t, a, "GET", "/idempotency/records/"+onlyRecord(t, a, "slow"), "", &rec)
				if rec.State != store.StateInFlight || rec.LeaseUntil.IsZero() || rec.Body != nil {
					t.Errorf("in-flight record: %+v", rec)
				}
			})

			t.Run("release then the retry executes once more", func(t *testing.T) {
				id := heldID(t, h, up, "h1")
				var rec recordView
				adminJSON(t, a, "POST", "/idempotency/records/"+id+"/release", `{"reason":"the CRM has no deal for it"}`, &rec)
				if rec.ID != id || rec.State != store.StateReleased || rec.Executions != 1 {
					t.Fatalf("released record: %+v", rec)
				}
				if len(rec.Audit) != 1 || rec.Audit[0].Actor != "admin-api" || rec.Audit[0].Action != "release" ||
					rec.Audit[0].Reason != "the CRM has no deal for it" || rec.Audit[0].At.IsZero() {
					t.Fatalf("audit after the release: %+v", rec.Audit)
				}
				before := up.count("/held")
				if w := post("/held", "h1"); w.Code != http.StatusInternalServerError {
					t.Errorf("retry after release: %d %s", w.Code, w.Body)
				}
				if w := post("/held", "h1"); w.Code != http.StatusConflict {
					t.Errorf("second retry: %d %s, want 409 (held again)", w.Code, w.Body)
				}
				if n := up.count("/held") - before; n != 1 {
					t.Errorf("executions after the release = %d, want 1", n)
				}
				adminJSON(t, a, "GET", "/idempotency/records/"+id, "", &rec)
				if rec.State != store.StateUnknown || rec.Executions != 2 || len(rec.Audit) != 1 {
					t.Errorf("record after the retry: %+v, want outcome_unknown with 2 executions and the audit entry", rec)
				}
				// A release without a body is still accepted (and audited).
				adminJSON(t, a, "POST", "/idempotency/records/"+id+"/release", "", &rec)
				if len(rec.Audit) != 2 || rec.Audit[1].Actor != "admin-api" || rec.Audit[1].Reason != "" {
					t.Errorf("audit after a release without a body: %+v", rec.Audit)
				}
			})

			t.Run("complete then the retry replays", func(t *testing.T) {
				id := heldID(t, h, up, "h2")
				const body = `{"id":"D-9021","ok":true}`
				var rec recordView
				adminJSON(t, a, "POST", "/idempotency/records/"+id+"/complete",
					`{"status":201,"headers":{"content-type":"application/json","X-Deal":["a","b"],"Content-Length":"999"},"body":`+strconvQuote(body)+`,"reason":"deal D-9021 seen in the CRM"}`, &rec)
				sum := sha256.Sum256([]byte(body))
				if rec.State != store.StateCompleted || rec.Status != 201 || rec.Digest != hex.EncodeToString(sum[:]) ||
					rec.ExternalID != "D-9021" || rec.Body == nil || *rec.Body != body {
					t.Fatalf("completed record: %+v", rec)
				}
				if len(rec.Audit) != 1 || rec.Audit[0].Action != "complete" || rec.Audit[0].Reason != "deal D-9021 seen in the CRM" {
					t.Fatalf("audit after the complete: %+v", rec.Audit)
				}
				before := up.count("/held")
				w := post("/held", "h2")
				if w.Code != 201 || w.Body.String() != body || w.Header().Get("Idempotent-Replayed") != "true" ||
					w.Header().Get("Content-Type") != "application/json" || fmt.Sprint(w.Header()["X-Deal"]) != "[a b]" ||
					w.Header().Get("Content-Length") != fmt.Sprint(len(body)) {
					t.Errorf("retry after complete: %d %v %s", w.Code, w.Header(), w.Body)
				}
				if n := up.count("/held") - before; n != 0 {
					t.Errorf("executions after the complete = %d, want 0", n)
				}
			})

			t.Run("conflicts", func(t *testing.T) {
				slow := onlyRecord(t, a, "slow")
				if code, b := adminDo(t, a, "POST", "/idempotency/records/"+slow+"/release", ""); code != http.StatusConflict {
					t.Errorf("release of a live in-flight record: %d %s", code, b)
				}
				if code, b := adminDo(t, a, "POST", "/idempotency/records/"+slow+"/complete", `{"status":200}`); code != http.StatusConflict {
					t.Errorf("complete of a live in-flight record: %d %s", code, b)
				}
				deal := onlyRecord(t, a, "deals")
				if code, b := adminDo(t, a, "POST", "/idempotency/records/"+deal+"/complete", `{"status":200}`); code != http.StatusConflict {
					t.Errorf("complete of a completed record: %d %s", code, b)
				}
				close(up.gate)
				<-slowDone
				if n := up.count("/slow"); n != 1 {
					t.Errorf("/slow executions = %d, want 1", n)
				}
			})

			t.Run("errors", func(t *testing.T) {
				deal := onlyRecord(t, a, "deals")
				const missing = "0123456789abcdef0123456789abcdef"
				for _, tc := range []struct {
					method, target, body string
					code                 int
					msg                  string
				}{
					{"GET", "/idempotency/records/" + missing, "", 404, "not found"},
					{"POST", "/idempotency/records/" + missing + "/release", "", 404, "not found"},
					{"POST", "/idempotency/records/" + missing + "/complete", `{"status":200}`, 404, "not found"},
					{"GET", "/idempotency/records/NOT-AN-ID", "", 400, "not a record id"},
					{"GET", "/idempotency/records?state=done", "", 400, `state "done" is not one of in_flight, completed, outcome_unknown, retries_exhausted, released`},
					{"GET", "/idempotency/records?limit=0", "", 400, "limit"},
					{"GET", "/idempotency/records?limit=1001", "", 400, "limit"},
					{"GET", "/idempotency/records?limit=x", "", 400, "limit"},
					{"GET", "/idempotency/records?cursor=zz.1", "", 400, "cursor"},
					{"POST", "/idempotency/records", "", 405, "use GET"},
					{"GET", "/idempotency/records/" + deal + "/release", "", 405, "use POST"},
					{"DELETE", "/idempotency/records/" + deal, "", 405, "use GET"},
					{"GET", "/idempotency/other", "", 404, "not found"},
					{"GET", "/idempotency/recordsx", "", 404, "not found"},
					{"POST", "/idempotency/records/" + deal + "/forget", "", 404, "not found"},
					{"POST", "/idempotency/records/" + deal + "/complete", `{"status":200`, 400, "request body"},
					{"POST", "/idempotency/records/" + deal + "/complete", `{"status":200,"colour":"red"}`, 400, "unknown field"},
					{"POST", "/idempotency/records/" + deal + "/complete", `{"status":200} {}`, 400, "more than one"},
					{"POST", "/idempotency/records/" + deal + "/complete", `{}`, 400, "status 0"},
					{"POST", "/idempotency/records/" + deal + "/release", `{"reason":1}`, 400, "request body"},
					{"POST", "/idempotency/records/" + deal + "/release", `{"why":"x"}`, 400, "unknown field"},
					{"POST", "/idempotency/records/" + deal + "/release", `{"reason":"` + strings.Repeat("r", store.MaxReasonLen+1) + `"}`, 400, "reason is longer"},
				} {
					code, b := adminDo(t, a, tc.method, tc.target, tc.body)
					if code != tc.code || !strings.Contains(string(b), tc.msg) {
						t.Errorf("%s %s %s: %d %s, want %d containing %q", tc.method, tc.target, tc.body, code, b, tc.code, tc.msg)
					}
				}
			})
		})
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// heldID returns the id of the held record of key, from the retry's 409
// problem.
func heldID(t *testing.T, h *caddymodule.Handler, up *adminUpstream, key string) string {
	t.Helper()
	w := serve(h, up.next, "POST", "/held", `{"n":1}`, "Idempotency-Key", key)
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusConflict || !strings.HasSuffix(p.Type, "#outcome-unknown") || len(p.RecordID) != 32 {
		t.Fatalf("retry of a held key: %d %s", w.Code, w.Body)
	}
	return p.RecordID
}

// TestAdminCompleteRequest checks the operator's outcome before it is
// stored.
func TestAdminCompleteRequest(t *testing.T) {
	withID := &operator.Target{Known: true, Route: config.Resolved{ExternalID: "deal.id"}}
	for _, tc := range []struct {
		name string
		body string
		rt   *operator.Target // nil: the record's route is not configured any more
		want store.Result     // Digest is checked against the body
		err  string
	}{
		{name: "text body", body: `{"status":201,"body":"hi"}`, want: store.Result{Status: 201, Body: []byte("hi"), Header: http.Header{}}},
		{name: "base64 body", body: `{"status":200,"body_base64":"//4A"}`, want: store.Result{Status: 200, Body: []byte{0xff, 0xfe, 0}, Header: http.Header{}}},
		{name: "no body", body: `{"status":204}`, want: store.Result{Status: 204, Header: http.Header{}}},
		{name: "headers canonical, one or many values, per-server ones dropped",
			body: `{"status":200,"headers":{"content-type":"text/plain","X-A":["1","2"],"Date":"x","Connection":"close","Transfer-Encoding":"chunked"}}`,
			want: store.Result{Status: 200, Header: http.Header{"Content-Type": {"text/plain"}, "X-A": {"1", "2"}}}},
		{name: "external id given", body: `{"status":200,"body":"{\"deal\":{\"id\":\"D-1\"}}","external_id":"X-7"}`, rt: withID,
			want: store.Result{Status: 200, Body: []byte(`{"deal":{"id":"D-1"}}`), ExternalID: "X-7", Header: http.Header{}}},
		{name: "external id from the route's path", body: `{"status":200,"body":"{\"deal\":{\"id\":\"D-1\"}}"}`, rt: withID,
			want: store.Result{Status: 200, Body: []byte(`{"deal":{"id":"D-1"}}`), ExternalID: "D-1", Header: http.Header{}}},
		{name: "route gone", body: `{"status":200,"body":"{\"deal\":{\"id\":\"D-1\"}}"}`,
			want: store.Result{Status: 200, Body: []byte(`{"deal":{"id":"D-1"}}`), Header: http.Header{}}},
		{name: "status missing", body: `{"body":"x"}`, err: "status 0 is not a final HTTP status"},
		{name: "informational status", body: `{"status":103}`, err: "status 103"},
		{name: "status too big", body: `{"status":600}`, err: "status 600"},
		{name: "both bodies", body: `{"status":200,"body":"a","body_base64":"YQ=="}`, err: "not both"},
		{name: "bad base64", body: `{"status":200,"body_base64":"!!"}`, err: "body_base64"},
		{name: "body with 204", body: `{"status":204,"body":"x"}`, err: "status 204 has no body"},
		{name: "bad header name", body: `{"status":200,"headers":{"Bad Name":"x"}}`, err: `header name "Bad Name"`},
		{name: "empty header name", body: `{"status":200,"headers":{"":"x"}}`, err: `header name ""`},
		{name: "header value with newline", body: `{"status":200,"headers":{"X-A":"a\r\nX-B: b"}}`, err: "header X-A"},
		{name: "external id too long", body: `{"status":200,"external_id":"` + strings.Repeat("x", 256) + `"}`, err: "external id must be at most 255 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req completeRequest
			if err := json.Unmarshal([]byte(tc.body), &req); err != nil {
				t.Fatal(err)
			}
			var res store.Result
			comp, err := req.completion()
			if err == nil {
				t := operator.Target{}
				if tc.rt != nil {
					t = *tc.rt
				}
				res, err = comp.Result(t)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(tc.want.Body)
			tc.want.Digest = hex.EncodeToString(sum[:])
			if fmt.Sprintf("%+v", res) != fmt.Sprintf("%+v", tc.want) {
				t.Errorf("result\n got %+v\nwant %+v", res, tc.want)
			}
		})
	}
	var v headerValues
	if err := json.Unmarshal([]byte(`{"a":1}`), &v); err == nil {
		t.Error("an object was accepted as header values")
	}
}

// TestAdminPagination walks listings page by page over two stores: every
// record exactly once, whatever the page size.
func TestAdminPagination(t *testing.T) {
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			const rules = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
`
			one := newHandler(t, rules, st.cfg(t))
			two := newHandler(t, rules, st.cfg(t)) // a second store
			a := newAdmin(one, two)
			up := newAdminUpstream()
			var want []string
			for i := range 23 {
				h := one
				if i%3 == 0 {
					h = two
				}
				serve(h, up.next, "POST", "/deals", "{}", "Idempotency-Key", fmt.Sprint("k", i))
			}
			for _, h := range []*caddymodule.Handler{one, two} {
				page, err := engine(h).List(context.Background(), store.ListFilter{Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range page.Records {
					want = append(want, r.ID)
				}
			}
			slices.Sort(want)
			if len(want) != 23 {
				t.Fatalf("%d records in the stores, want 23", len(want))
			}
			for _, limit := range []int{0, 1, 7, 8, 15, 16, 23, 1000} {
				if got := routeIDs(adminList(t, a, "", limit), ""); !slices.Equal(got, want) {
					t.Errorf("limit %d: %d ids %v\nwant %d %v", limit, len(got), got, len(want), want)
				}
			}
			// A record of either store is found by id.
			for _, id := range []string{want[0], want[len(want)-1]} {
				var rec recordView
				adminJSON(t, a, "GET", "/idempotency/records/"+id, "", &rec)
				if rec.ID != id || rec.State != store.StateCompleted {
					t.Errorf("get %s: %+v", id, rec)
				}
			}
		})
	}
}

// TestAdminModule: the module is registered under admin.api and serves
// /idempotency/ on Caddy's admin endpoint; with no handler loaded a
// listing is empty.
func TestAdminModule(t *testing.T) {
	info, err := caddy.GetModule("admin.api.idempotency")
	if err != nil {
		t.Fatal(err)
	}
	mod := info.New()
	router, ok := mod.(caddy.AdminRouter)
	if !ok {
		t.Fatalf("%T is not a caddy.AdminRouter", mod)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := mod.(caddy.Provisioner).Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if r := router.Routes(); len(r) != 1 || r[0].Pattern != "/idempotency/" {
		t.Errorf("routes %+v", r)
	}
	a := &AdminAPI{stores: func() []operator.LiveStore { return nil }}
	var page recordList
	adminJSON(t, a, "GET", "/idempotency/records", "", &page)
	if page.Records == nil || len(page.Records) != 0 || page.NextCursor != "" {
		t.Errorf("empty registry: %+v", page)
	}
}

// TestAdminPostNeedsJSON: the resolving endpoints accept only
// application/json, so a page on another site cannot release or complete
// records through an operator's browser (a cross-site form POSTs
// text/plain, urlencoded or multipart; a no-cors fetch may send no
// Content-Type at all). The refusal is a 415 problem, before the record
// is touched.
func TestAdminPostNeedsJSON(t *testing.T) {
	h := newHandler(t, adminTestRules, testStores[0].cfg(t))
	a := newAdmin(h)
	up := newAdminUpstream()
	serve(h, up.next, "POST", "/held", `{"n":1}`, "Idempotency-Key", "csrf-1")
	id := heldID(t, h, up, "csrf-1")
	for _, target := range []string{"/idempotency/records/" + id + "/release", "/idempotency/records/" + id + "/complete"} {
		for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
			"multipart/form-data; boundary=x", "", "application/jsonp", "text/json", "application/json-patch+json", "application/json;;"} {
			code, rct, b := adminSend(t, a, "POST", target, ct, `{"status":200}`)
			var p problem
			if code != http.StatusUnsupportedMediaType || rct != "application/problem+json" || json.Unmarshal(b, &p) != nil ||
				p.Status != 415 || !strings.HasSuffix(p.Type, "#admin-json-only") || !strings.Contains(p.Detail, "application/json") {
				t.Errorf("POST %s as %q: %d %s %s, want 415 problem+json", target, ct, code, rct, b)
			}
		}
	}
	var rec recordView
	adminJSON(t, a, "GET", "/idempotency/records/"+id, "", &rec)
	if rec.State != store.StateUnknown {
		t.Fatalf("after the refused POSTs the record is %s, want still outcome_unknown", rec.State)
	}
	// application/json with parameters, in any case, is fine.
	code, _, b := adminSend(t, a, "POST", "/idempotency/records/"+id+"/release", "Application/JSON; charset=utf-8", "")
	if code != http.StatusOK || json.Unmarshal(b, &rec) != nil || rec.State != store.StateReleased {
		t.Fatalf("release as application/json: %d %s", code, b)
	}
	// A wrong method is still a 405, whatever the Content-Type.
	if code, _, b := adminSend(t, a, "GET", "/idempotency/records/"+id+"/release", "text/plain", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET release: %d %s", code, b)
	}
}

// TestAdminRedactsCredentials: the record view (and the answers of
// release and complete, which show the record) redacts credentials in the
// stored response's headers; replays still send them.
func TestAdminRedactsCredentials(t *testing.T) {
	h := newHandler(t, adminTestRules, testStores[0].cfg(t))
	a := newAdmin(h)
	const cookie = "sid=s3cr3t-session; Path=/; HttpOnly"
	next := func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/deals/D-1")
		w.Header().Add("Set-Cookie", cookie)
		w.Header().Add("Set-Cookie", "theme=dark")
		w.Header().Set("X-Api-Key", "ak-s3cr3t")
		w.Header().Set("X-Auth-Token", "tok-s3cr3t")
		w.Header().Set("Authorization", "Bearer s3cr3t")
		w.WriteHeader(http.StatusCreated)
		_, err := w.Write([]byte(`{"id":"D-1"}`))
		return err
	}
	serve(h, next, "POST", "/deals", `{}`, "Idempotency-Key", "cookie-1")
	id := onlyRecord(t, a, "deals")
	code, raw := adminDo(t, a, "GET", "/idempotency/records/"+id, "")
	if code != http.StatusOK || strings.Contains(string(raw), "s3cr3t") {
		t.Fatalf("record view shows a credential: %d %s", code, raw)
	}
	var rec recordView
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	want := http.Header{
		"Content-Type":  {"application/json"},
		"Location":      {"/deals/D-1"},
		"Set-Cookie":    {"sid=" + operator.Redacted + "; Path=/; HttpOnly", "theme=" + operator.Redacted},
		"X-Api-Key":     {operator.Redacted},
		"X-Auth-Token":  {operator.Redacted},
		"Authorization": {operator.Redacted},
	}
	if fmt.Sprint(rec.Headers) != fmt.Sprint(want) {
		t.Errorf("headers\n got %v\nwant %v", rec.Headers, want)
	}
	// The replay is the upstream's answer, credentials included.
	w := serve(h, next, "POST", "/deals", `{}`, "Idempotency-Key", "cookie-1")
	if w.Header().Get("Idempotent-Replayed") != "true" || w.Header().Values("Set-Cookie")[0] != cookie || w.Header().Get("X-Api-Key") != "ak-s3cr3t" {
		t.Errorf("replay: %v", w.Header())
	}
	// So are the answers of release and complete.
	for _, call := range []struct{ path, body string }{{"release", ""}, {"complete", `{"status":201,"headers":{"Set-Cookie":"sid=op-s3cr3t"}}`}} {
		code, raw := adminDo(t, a, "POST", "/idempotency/records/"+id+"/"+call.path, call.body)
		if code != http.StatusOK || strings.Contains(string(raw), "s3cr3t") {
			t.Errorf("%s answer: %d %s", call.path, code, raw)
		}
	}
}

// TestAdminRedactsBodyShapes: stored bodies whose credentials a plain
// JSON or form reading misses (NDJSON, an XSSI prefix, XML, multipart)
// show none through the record view: NDJSON and XSSI-prefixed JSON with
// the values hidden, XML and multipart only as their size and digest.
func TestAdminRedactsBodyShapes(t *testing.T) {
	h := newHandler(t, adminTestRules, testStores[0].cfg(t))
	a := newAdmin(h)
	for i, tc := range []struct{ ct, body, shown string }{
		{"application/x-ndjson", "{\"id\":\"D-1\"}\n{\"pwd\":\"s3cr3t-ndjson\"}\n", `"pwd":"[redacted]"`},
		{"application/json", ")]}'\n{\"accessKeyId\":\"s3cr3t-xssi\"}", `"accessKeyId":"[redacted]"`},
		{"application/xml", "<deal><password>s3cr3t-xml</password></deal>", ""},
		{"multipart/form-data; boundary=B", "--B\r\nContent-Disposition: form-data; name=\"token\"\r\n\r\ns3cr3t-multipart\r\n--B--\r\n", ""},
	} {
		if tc.shown == "" { // size and digest only
			tc.shown = fmt.Sprintf("%d bytes, sha256 %x", len(tc.body), sha256.Sum256([]byte(tc.body)))
		}
		next := func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Content-Type", tc.ct)
			w.WriteHeader(http.StatusCreated)
			_, err := w.Write([]byte(tc.body))
			return err
		}
		before := routeIDs(adminList(t, a, "route=deals", 0), "")
		serve(h, next, "POST", "/deals", `{}`, "Idempotency-Key", fmt.Sprintf("shape-%d", i))
		ids := slices.DeleteFunc(routeIDs(adminList(t, a, "route=deals", 0), ""), func(id string) bool { return slices.Contains(before, id) })
		if len(ids) != 1 {
			t.Fatalf("%s: new records %v, want 1", tc.ct, ids)
		}
		id := ids[0]
		code, raw := adminDo(t, a, "GET", "/idempotency/records/"+id, "")
		if leak := strings.Contains(string(raw), "s3cr3t"); code != http.StatusOK || leak || !strings.Contains(string(raw), strings.ReplaceAll(tc.shown, `"`, `\"`)) {
			t.Errorf("%s: record view %d, the credential shows: %v; want %s in it and no credential:\n%s", tc.ct, code, leak, tc.shown, raw)
		}
	}
	// A route with show_unparsed_bodies shows XML as it is stored.
	const xml = "<deal><id>D-7</id></deal>"
	serve(h, func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/xml")
		_, err := w.Write([]byte(xml))
		return err
	}, "POST", "/files", `{}`, "Idempotency-Key", "xml-shown")
	var rec recordView
	adminJSON(t, a, "GET", "/idempotency/records/"+onlyRecord(t, a, "files"), "", &rec)
	if rec.Body == nil || *rec.Body != xml || rec.BodyUnparsed != "" {
		t.Errorf("show_unparsed_bodies: body %v, body_unparsed %q; want the XML as stored", rec.Body, rec.BodyUnparsed)
	}
}

// TestAdminToolCall: the record of a held MCP tool call names the tool,
// in the listing and the record view, and shows its arguments with the
// credential-like fields and the route's redact_fields redacted; a
// record of another route shows neither.
func TestAdminToolCall(t *testing.T) {
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			h := newHandler(t, adminTestRules+`  - name: crm_tools
    protocol: mcp
    match: { path: /mcp, tools: [create_deal] }
    key: ["{body.params.arguments.event_id}:{body.params.name}"]
    redact_fields: [customer_note]
`, st.cfg(t))
			a := newAdmin(h)
			up := newAdminUpstream()
			serve(h, up.next, "POST", "/deals", `{"password":"s3cr3t-plain"}`, "Idempotency-Key", "plain-1")
			broken := func(w http.ResponseWriter, r *http.Request) error {
				w.WriteHeader(http.StatusBadGateway) // the server died mid-call: outcome unknown
				return nil
			}
			call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_deal","arguments":` +
				`{"event_id":"evt_8812","name":"Acme renewal","password":"s3cr3t-pw","api_key":"s3cr3t-key","customer_note":"s3cr3t-note"}}}`
			serve(h, broken, "POST", "/mcp", call, "Content-Type", "application/json", "Accept", "application/json, text/event-stream")

			recs := adminList(t, a, "route=crm_tools", 0)
			if len(recs) != 1 || recs[0].Tool != "create_deal" || recs[0].State != store.StateUnknown {
				t.Fatalf("listing: %+v", recs)
			}
			code, raw := adminDo(t, a, "GET", "/idempotency/records/"+recs[0].ID, "")
			if code != http.StatusOK || strings.Contains(string(raw), "s3cr3t") {
				t.Fatalf("record view: %d %s", code, raw)
			}
			var v recordView
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatal(err)
			}
			want := `{"event_id":"evt_8812","name":"Acme renewal","password":"[redacted]","api_key":"[redacted]","customer_note":"[redacted]"}`
			if v.Tool != "create_deal" || v.Arguments == nil || *v.Arguments != want {
				t.Fatalf("record view: tool %q, arguments %v; want %s", v.Tool, v.Arguments, want)
			}
			// Nothing unredacted reached the store either.
			rec, err := engine(h).Get(context.Background(), recs[0].ID)
			if err != nil || rec.Call == nil || strings.Contains(rec.Call.Arguments, "s3cr3t") {
				t.Fatalf("stored: %+v, %v", rec, err)
			}

			plain := onlyRecord(t, a, "deals")
			_, raw = adminDo(t, a, "GET", "/idempotency/records/"+plain, "")
			if strings.Contains(string(raw), `"tool"`) || strings.Contains(string(raw), `"arguments"`) {
				t.Fatalf("a record of another route: %s", raw)
			}
		})
	}
}
