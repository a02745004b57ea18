package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// adminSendAsync makes a request in the background (no t calls off the
// test goroutine) and reports its status.
func adminSendAsync(method, target, key string) <-chan int {
	done := make(chan int, 1)
	go func() {
		r, _ := do(client, method, target, []byte(`{}`), "Idempotency-Key", key)
		done <- r.status
	}()
	return done
}

const adminRules = `
routes:
` + dealsAndHeldRoutes + `  - name: files
    match: { path: /binary }
    key: ["{header.Idempotency-Key}"]
    show_unparsed_bodies: true
  - name: slow
    match: { path: /slow }
    key: ["{header.Idempotency-Key}"]
`

// TestAdminAPI drives the operator API of the real binary on its admin
// endpoint: listing by state and route with pagination, the single record
// view, release (the next retry executes exactly once more), complete (the
// next retry replays the operator's answer), and its 400/404/405/409
// answers.
func TestAdminAPI(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		up := newUpstream(t)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: adminRules})
		post := func(path, key string) response {
			return send(t, "POST", gw.url+path, []byte(`{}`), "Idempotency-Key", key)
		}
		if r := post("/deals", "adm-d1"); r.status != http.StatusCreated {
			t.Fatalf("deal: %d %s", r.status, r.body)
		}
		for _, key := range []string{"adm-h1", "adm-h2"} {
			if r := post("/status/500", key); r.status != http.StatusInternalServerError {
				t.Fatalf("held: %d %s", r.status, r.body)
			}
		}
		if r := post("/binary", "adm-f1"); r.status != http.StatusOK {
			t.Fatalf("binary: %d %s", r.status, r.body)
		}
		open := up.gate("/slow")
		defer open()
		slow := adminSendAsync("POST", gw.url+"/slow", "adm-s1")
		for i := 0; len(adminList(t, gw, "state=in_flight", 0)) == 0; i++ {
			if i > 500 {
				t.Fatal("the gated call never showed as in flight")
			}
			time.Sleep(10 * time.Millisecond)
		}

		t.Run("list", func(t *testing.T) {
			all := adminList(t, gw, "", 0)
			if got := adminRoutes(all); !slices.Equal(got, []string{"deals", "files", "held", "held", "slow"}) {
				t.Fatalf("routes of all records: %v", got)
			}
			seen := map[string]int{}
			for _, r := range adminList(t, gw, "", 2) {
				seen[r.ID]++
			}
			for _, r := range all {
				if seen[r.ID] != 1 {
					t.Errorf("paging by 2 showed %s %d times", r.ID, seen[r.ID])
				}
			}
			for _, tc := range []struct {
				query  string
				routes []string
			}{
				{"state=completed", []string{"deals", "files"}},
				{"state=outcome_unknown", []string{"held", "held"}},
				{"state=in_flight", []string{"slow"}},
				{"state=released", []string{}},
				{"route=held", []string{"held", "held"}},
				{"route=held&state=completed", []string{}},
			} {
				if got := adminRoutes(adminList(t, gw, tc.query, 0)); !slices.Equal(got, tc.routes) {
					t.Errorf("%s: %v, want %v", tc.query, got, tc.routes)
				}
			}
			_, raw := adminDo(t, gw, "GET", "/idempotency/records", "")
			for _, field := range []string{`"body`, `"headers"`} {
				if strings.Contains(string(raw), field) {
					t.Errorf("the listing shows %s: %s", field, raw)
				}
			}
		})

		t.Run("get", func(t *testing.T) {
			var rec adminRecord
			adminJSON(t, gw, "GET", "/idempotency/records/"+adminOnly(t, gw, "deals").ID, "", &rec)
			if rec.State != "completed" || rec.Status != 201 || rec.ExternalID != "D-9021" || rec.Attempts != 1 ||
				rec.Executions != 1 || rec.Body == nil || !strings.Contains(*rec.Body, `"id":"D-9021"`) ||
				rec.Headers["Location"][0] != "/deals/D-9021" || len(rec.Headers["Set-Cookie"]) != 2 {
				t.Errorf("completed record: %+v", rec)
			}
			if sum := sha256.Sum256([]byte(*rec.Body)); rec.Digest != hex.EncodeToString(sum[:]) {
				t.Errorf("digest %s does not match the body", rec.Digest)
			}
			rec = adminRecord{}
			adminJSON(t, gw, "GET", "/idempotency/records/"+adminOnly(t, gw, "files").ID, "", &rec)
			if b, err := base64.StdEncoding.DecodeString(rec.BodyBase64); err != nil || !bytes.Equal(b, binaryBody) || rec.Body != nil {
				t.Errorf("binary record: body %v, body_base64 %q", rec.Body, rec.BodyBase64)
			}
			rec = adminRecord{}
			adminJSON(t, gw, "GET", "/idempotency/records/"+adminOnly(t, gw, "slow").ID, "", &rec)
			if rec.State != "in_flight" || !rec.LeaseUntil.After(rec.StartedAt) {
				t.Errorf("in-flight record: %+v", rec)
			}
		})

		t.Run("live in-flight records cannot be resolved", func(t *testing.T) {
			id := adminOnly(t, gw, "slow").ID
			adminError(t, gw, "POST", "/idempotency/records/"+id+"/release", "", http.StatusConflict)
			adminError(t, gw, "POST", "/idempotency/records/"+id+"/complete", `{"status":200}`, http.StatusConflict)
			open()
			if code := <-slow; code != http.StatusCreated {
				t.Errorf("the gated call: %d", code)
			}
			if n := up.count("/slow"); n != 1 {
				t.Errorf("/slow executions = %d, want 1", n)
			}
		})

		t.Run("release then the retry executes once more", func(t *testing.T) {
			id := adminHeldID(t, gw, "/status/500", "adm-h1")
			before := up.count("/status/500")
			var rec adminRecord
			adminJSON(t, gw, "POST", "/idempotency/records/"+id+"/release", "", &rec)
			if rec.ID != id || rec.State != "released" || rec.Executions != 1 {
				t.Fatalf("released: %+v", rec)
			}
			if r := post("/status/500", "adm-h1"); r.status != http.StatusInternalServerError {
				t.Errorf("retry after the release: %d %s, want the upstream's 500", r.status, r.body)
			}
			// The upstream failed again, so the record is held again.
			adminHeldID(t, gw, "/status/500", "adm-h1")
			if n := up.count("/status/500") - before; n != 1 {
				t.Errorf("executions after the release = %d, want exactly 1", n)
			}
			adminJSON(t, gw, "GET", "/idempotency/records/"+id, "", &rec)
			if rec.State != "outcome_unknown" || rec.Executions != 2 || rec.Attempts != 4 {
				t.Errorf("record: %+v, want outcome_unknown, executions 2, attempts 4", rec)
			}
		})

		t.Run("complete then the retry replays", func(t *testing.T) {
			id := adminHeldID(t, gw, "/status/500", "adm-h2")
			before := up.count("/status/500")
			const body = `{"id":"D-9021","verified":true}`
			var rec adminRecord
			adminJSON(t, gw, "POST", "/idempotency/records/"+id+"/complete",
				`{"status":201,"headers":{"Content-Type":["application/json"]},"body":`+strconv.Quote(body)+`,"external_id":"D-9021"}`, &rec)
			sum := sha256.Sum256([]byte(body))
			if rec.State != "completed" || rec.Status != 201 || rec.ExternalID != "D-9021" || rec.Digest != hex.EncodeToString(sum[:]) {
				t.Fatalf("completed: %+v", rec)
			}
			for range 2 {
				r := post("/status/500", "adm-h2")
				if r.status != http.StatusCreated || string(r.body) != body || r.header.Get("Idempotent-Replayed") != "true" ||
					r.header.Get("Content-Type") != "application/json" {
					t.Errorf("retry after the complete: %d %v %s", r.status, r.header, r.body)
				}
			}
			if n := up.count("/status/500") - before; n != 0 {
				t.Errorf("executions after the complete = %d, want 0", n)
			}
			adminError(t, gw, "POST", "/idempotency/records/"+id+"/complete", `{"status":200}`, http.StatusConflict)
		})

		t.Run("errors", func(t *testing.T) {
			const missing = "00000000000000000000000000000000"
			deal := adminOnly(t, gw, "deals").ID
			for _, tc := range []struct {
				method, path, body string
				status             int
				msg                string
			}{
				{"GET", "/idempotency/records/" + missing, "", 404, "not found"},
				{"POST", "/idempotency/records/" + missing + "/release", "", 404, "not found"},
				{"POST", "/idempotency/records/" + missing + "/complete", `{"status":200}`, 404, "not found"},
				{"GET", "/idempotency/records/xyz", "", 400, "not a record id"},
				{"GET", "/idempotency/records?state=done", "", 400, "state"},
				{"GET", "/idempotency/records?limit=5000", "", 400, "limit"},
				{"GET", "/idempotency/records?cursor=nope", "", 400, "cursor"},
				{"POST", "/idempotency/records/" + deal + "/complete", `{"status":"201"}`, 400, "request body"},
				{"POST", "/idempotency/records/" + deal + "/complete", `{"status":201,"body":"a","body_base64":"YQ=="}`, 400, "not both"},
				{"POST", "/idempotency/records/" + deal + "/complete", `{"status":42}`, 400, "status 42"},
				{"POST", "/idempotency/records/" + deal + "/complete", `{"status":201,"headers":{"Bad Name":["x"]}}`, 400, "header name"},
				{"GET", "/idempotency/records/" + deal + "/release", "", 405, "POST"},
			} {
				if msg := adminError(t, gw, tc.method, tc.path, tc.body, tc.status); !strings.Contains(msg, tc.msg) {
					t.Errorf("%s %s: %q, want it to mention %q", tc.method, tc.path, msg, tc.msg)
				}
			}
		})
	})
}

// TestAdminMetricsSurviveReload scrapes the admin endpoint's /metrics
// (served by Caddy's admin.api.metrics from the running config's registry;
// no `metrics` option needed) before and after `idemgate reload` with
// changed rules: the counters keep counting across the new registry, and
// the operator API still sees the records.
func TestAdminMetricsSurviveReload(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: reloadRulesBefore})
	executed := func() float64 {
		return metric(t, gw, "idemgate_requests_total", `route="deals"`, `outcome="executed"`)
	}
	replayed := func() float64 {
		return metric(t, gw, "idemgate_requests_total", `route="deals"`, `outcome="replayed"`)
	}
	for range 2 {
		send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", "m-1")
	}
	if e, r := executed(), replayed(); e != 1 || r != 1 {
		t.Fatalf("before the reload: executed %v, replayed %v; want 1, 1", e, r)
	}
	if got := metric(t, gw, "idemgate_upstream_executions_total", `route="deals"`, `result="completed"`); got != 1 {
		t.Errorf("upstream executions before the reload = %v, want 1", got)
	}

	if err := os.WriteFile(filepath.Join(gw.dir, "routes.yaml"), []byte(reloadRulesAfter), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := gw.reload(); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	if e, r := executed(), replayed(); e != 1 || r != 1 {
		t.Errorf("right after the reload: executed %v, replayed %v; want 1, 1 (counters were reset or lost)", e, r)
	}
	send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", "m-1")
	send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", "m-2")
	send(t, "POST", gw.url+"/refunds", []byte(`{}`), "Idempotency-Key", "m-3")
	if e, r := executed(), replayed(); e != 2 || r != 2 {
		t.Errorf("after the reload: executed %v, replayed %v; want 2, 2", e, r)
	}
	if got := metric(t, gw, "idemgate_requests_total", `route="refunds"`, `outcome="executed"`); got != 1 {
		t.Errorf("the new route's executions = %v, want 1", got)
	}
	if got := metric(t, gw, "idemgate_store_duration_seconds_count", `op="claim"`, `result="ok"`); got < 5 {
		t.Errorf("store latency claim count = %v, want at least 5", got)
	}
	// The admin module is made afresh on each load; it still finds the
	// store (records from before the reload included).
	if got := adminRoutes(adminList(t, gw, "", 0)); !slices.Equal(got, []string{"deals", "deals", "refunds"}) {
		t.Errorf("records after the reload: %v", got)
	}
}

// TestAdminSecretsNeverShown sends requests carrying a known secret in
// Authorization (the scope), in a body field and in the key, along every
// path (executed, replayed, mismatch, held, missing key, key from the
// body), then checks that no operator answer (listing, single records,
// release) and no gateway log line contains it. The upstream never echoes
// request data: the single record view shows the stored response only.
func TestAdminSecretsNeverShown(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-TOKEN-42"
	forEachBackend(t, func(t *testing.T, be backend) {
		up := newUpstream(t)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: `
routes:
  - name: pay
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
  - name: cards
    match: { path: /cards }
    key: ["{body.card}"]
  - name: held
    match: { path: /status/500 }
    key: ["{header.Idempotency-Key}"]
`})
		auth := "Bearer " + secret
		body := []byte(`{"card":"` + secret + `","amount":1}`)
		for _, tc := range []struct {
			path    string
			body    []byte
			headers []string
			status  int
		}{
			{"/deals", body, []string{"Idempotency-Key", "key-" + secret, "Authorization", auth}, 201},
			{"/deals", body, []string{"Idempotency-Key", "key-" + secret, "Authorization", auth}, 201},
			{"/deals", []byte(`{"card":"other-` + secret + `"}`), []string{"Idempotency-Key", "key-" + secret, "Authorization", auth}, 422},
			{"/deals", body, []string{"Authorization", auth}, 400},
			{"/cards", body, []string{"Authorization", auth}, 201},
			{"/status/500", body, []string{"Idempotency-Key", secret, "Authorization", auth}, 500},
			{"/status/500", body, []string{"Idempotency-Key", secret, "Authorization", auth}, 409},
		} {
			if r := send(t, "POST", gw.url+tc.path, tc.body, tc.headers...); r.status != tc.status {
				t.Errorf("POST %s: %d %s, want %d", tc.path, r.status, r.body, tc.status)
			}
		}
		var answers []string
		code, raw := adminDo(t, gw, "GET", "/idempotency/records", "")
		answers = append(answers, string(raw))
		recs := adminList(t, gw, "", 0)
		if code != http.StatusOK || len(recs) != 3 {
			t.Fatalf("listing: %d, %d records, want 3: %s", code, len(recs), raw)
		}
		for _, rec := range recs {
			_, b := adminDo(t, gw, "GET", "/idempotency/records/"+rec.ID, "")
			answers = append(answers, string(b))
			if rec.Route == "held" {
				_, b = adminDo(t, gw, "POST", "/idempotency/records/"+rec.ID+"/release", "")
				answers = append(answers, string(b))
			}
		}
		for _, a := range answers {
			if strings.Contains(a, secret) {
				t.Errorf("an admin answer contains the secret: %s", a)
			}
		}
		if !strings.Contains(gw.logs.String(), "idempotency decision") {
			t.Fatal("no decision was logged")
		}
		for _, line := range strings.Split(gw.logs.String(), "\n") {
			if strings.Contains(line, secret) {
				t.Errorf("a gateway log line contains the secret: %s", line)
			}
		}
	})
}

// TestAdminCrossSiteAndRedaction runs against the real binary: a
// cross-site form (text/plain or urlencoded) cannot release or complete a
// record through an operator's browser (415 problem+json, the record stays
// held), and the record view redacts the stored Set-Cookie values that
// replays still send. (Caddy itself refuses requests whose Origin is not
// the admin address, or that carry Sec-Fetch-Mode; these requests carry
// neither, as an older browser's or another client's may not.)
func TestAdminCrossSiteAndRedaction(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: adminRules})
	if r := send(t, "POST", gw.url+"/status/500", []byte(`{}`), "Idempotency-Key", "xs-h1"); r.status != http.StatusInternalServerError {
		t.Fatalf("held: %d %s", r.status, r.body)
	}
	id := adminHeldID(t, gw, "/status/500", "xs-h1")
	for _, tc := range []struct{ path, contentType, body string }{
		{"release", "text/plain", `{"x":"`},
		{"release", "", ""},
		{"complete", "application/x-www-form-urlencoded", `{"status":201}=`},
		{"complete", "text/plain;charset=UTF-8", `{"status":201}`},
	} {
		req, err := http.NewRequest("POST", gw.admin+"/idempotency/records/"+id+"/"+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := response{status: resp.StatusCode, header: resp.Header, body: b}
		if r.status != http.StatusUnsupportedMediaType {
			t.Errorf("cross-site %s as %q: %d %s, want 415", tc.path, tc.contentType, r.status, b)
			continue
		}
		if p := r.problem(t); !strings.HasSuffix(fmt.Sprint(p["type"]), "#admin-json-only") {
			t.Errorf("cross-site %s: problem %s", tc.path, b)
		}
	}
	var rec adminRecord
	adminJSON(t, gw, "GET", "/idempotency/records/"+id, "", &rec)
	if rec.State != "outcome_unknown" {
		t.Fatalf("after the cross-site POSTs the record is %s, want outcome_unknown", rec.State)
	}

	first := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", "xs-d1")
	if first.status != http.StatusCreated || len(first.header.Values("Set-Cookie")) != 2 {
		t.Fatalf("deal: %d %v", first.status, first.header)
	}
	code, raw := adminDo(t, gw, "GET", "/idempotency/records/"+adminOnly(t, gw, "deals").ID, "")
	if code != http.StatusOK || strings.Contains(string(raw), "session=abc") || strings.Contains(string(raw), "deal=D-") {
		t.Fatalf("the record view shows a stored cookie: %d %s", code, raw)
	}
	rec = adminRecord{}
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if got := rec.Headers["Set-Cookie"]; !slices.Equal(got, []string{"session=[redacted]; Path=/", "deal=[redacted]; Path=/"}) {
		t.Errorf("Set-Cookie in the record view: %q", got)
	}
	if rec.Headers["Location"][0] != "/deals/D-9021" {
		t.Errorf("Location in the record view: %q", rec.Headers["Location"])
	}
	replay := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", "xs-d1")
	if replay.header.Get("Idempotent-Replayed") != "true" || !slices.Equal(replay.header.Values("Set-Cookie"), first.header.Values("Set-Cookie")) {
		t.Errorf("replay: %v, want the stored cookies", replay.header)
	}
}
