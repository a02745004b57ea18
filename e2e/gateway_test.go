package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

const behaviourRules = `
defaults:
  ttl: 1h
  lock_lease: 30s
routes:
  - name: deals
    match: { methods: [POST, PUT], path: /deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
  - name: webhook
    operation: create_crm_deal
    match: { path: /hooks/* }
    key: ["{header.Idempotency-Key}", "{body.event.id}:{body.event.type}"]
    fingerprint:
      ignore: [meta.delivery_attempt]
  - name: optional
    match: { path: /optional }
    key: ["{header.Idempotency-Key}"]
    require_key: false
  - name: amounts
    match: { path: /amounts }
    key: ["{header.Idempotency-Key}"]
    fingerprint:
      body: [amount, currency]
  - name: small
    match: { path: /small }
    key: ["{header.Idempotency-Key}"]
    max_body: 1KiB
  - name: files
    match: { path: /binary }
    key: ["{header.Idempotency-Key}"]
  - name: big
    match: { path: /big }
    key: ["{header.Idempotency-Key}"]
    max_response: 1MiB
  - name: slow
    match: { path: /slow }
    key: ["{header.Idempotency-Key}"]
  - name: statuses
    match: { path: /status/* }
    key: ["{header.Idempotency-Key}"]
`

// TestGateway runs every row of the HTTP behaviour table against the real
// binary, once on the embedded store and once on a real redis-server.
func TestGateway(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		up := newUpstream(t)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: behaviourRules})
		for _, tc := range behaviourCases {
			t.Run(tc.name, func(t *testing.T) {
				tc.run(t, gw, up, strings.NewReplacer(" ", "_", ",", "").Replace(be.name+"-"+tc.name))
			})
		}
	})
}

type behaviourCase struct {
	name string
	run  func(t *testing.T, gw *gateway, up *upstream, key string)
}

var behaviourCases = []behaviourCase{
	{"parallel duplicates execute once", func(t *testing.T, gw *gateway, up *upstream, key string) {
		const n = 50
		path := "/deals"
		before := up.count(path)
		body := []byte(`{"title":"Acme","amount":4200}`)
		results := make([]response, n)
		together(n, func(i int) {
			results[i] = send(t, "POST", gw.url+path, body, "Idempotency-Key", key)
		})
		if got := up.count(path) - before; got != 1 {
			t.Fatalf("upstream executions = %d, want 1", got)
		}
		var created []response
		for _, r := range results {
			switch r.status {
			case http.StatusCreated:
				created = append(created, r)
			case http.StatusConflict:
				if r.header.Get("Retry-After") == "" {
					t.Errorf("409 without Retry-After")
				}
				r.problem(t)
			default:
				t.Errorf("unexpected status %d: %s", r.status, r.body)
			}
		}
		if len(created) == 0 {
			t.Fatal("no request got the upstream's 201")
		}
		// After the race every retry is a byte-identical replay.
		first := created[0]
		for range 5 {
			r := send(t, "POST", gw.url+path, body, "Idempotency-Key", key)
			if r.status != http.StatusCreated || !bytes.Equal(r.body, first.body) {
				t.Fatalf("replay = %d %s, want 201 %s", r.status, r.body, first.body)
			}
			if r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("replay without Idempotent-Replayed: %v", r.header)
			}
		}
		if got := up.count(path) - before; got != 1 {
			t.Fatalf("upstream executions after replays = %d, want 1", got)
		}
	}},
	{"sequential replay keeps status, headers and body", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/deals")
		body := []byte(`{"title":"Acme"}`)
		first := send(t, "POST", gw.url+"/deals", body, "Idempotency-Key", key, "Content-Type", "application/json")
		second := send(t, "POST", gw.url+"/deals", body, "Idempotency-Key", key, "Content-Type", "application/json")
		if first.status != http.StatusCreated || second.status != http.StatusCreated {
			t.Fatalf("statuses %d, %d; want 201, 201", first.status, second.status)
		}
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("first response marked as replayed")
		}
		if second.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("second response not marked as replayed")
		}
		if !bytes.Equal(first.body, second.body) {
			t.Errorf("replayed body differs:\n%s\n%s", first.body, second.body)
		}
		for _, name := range []string{"Location", "Content-Type", "X-Upstream-Call"} {
			if first.header.Get(name) == "" || first.header.Get(name) != second.header.Get(name) {
				t.Errorf("%s: first %q, replay %q", name, first.header.Get(name), second.header.Get(name))
			}
		}
		if got, want := second.header.Values("Set-Cookie"), first.header.Values("Set-Cookie"); len(want) != 2 || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("Set-Cookie replayed as %q, want %q", got, want)
		}
		if got := up.count("/deals") - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1", got)
		}
	}},
	{"same key different payload is 422", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/deals")
		send(t, "POST", gw.url+"/deals", []byte(`{"amount":1}`), "Idempotency-Key", key)
		r := send(t, "POST", gw.url+"/deals", []byte(`{"amount":2}`), "Idempotency-Key", key)
		if r.status != http.StatusUnprocessableEntity {
			t.Fatalf("status %d, want 422: %s", r.status, r.body)
		}
		p := r.problem(t)
		if p["title"] != "Idempotency-Key is already used" || !strings.Contains(p["detail"].(string), "deals") || p["route"] != "deals" {
			t.Errorf("problem = %v", p)
		}
		if got := up.count("/deals") - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1 (nothing forwarded on mismatch)", got)
		}
	}},
	{"canonical JSON is the same payload", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/deals")
		a := send(t, "POST", gw.url+"/deals", []byte(`{"a":1,"b":{"x":"y","z":[1,2]}}`), "Idempotency-Key", key)
		b := send(t, "POST", gw.url+"/deals", []byte("{ \"b\" : { \"z\":[1, 2], \"x\":\"\\u0079\" },\n \"a\":1 }"), "Idempotency-Key", key)
		if a.status != 201 || b.status != 201 || b.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("statuses %d, %d (replayed %q); want a replay", a.status, b.status, b.header.Get("Idempotent-Replayed"))
		}
		if got := up.count("/deals") - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1", got)
		}
	}},
	{"fingerprint body fields select what counts", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/amounts")
		send(t, "POST", gw.url+"/amounts", []byte(`{"amount":5,"currency":"EUR","note":"first"}`), "Idempotency-Key", key)
		same := send(t, "POST", gw.url+"/amounts", []byte(`{"amount":5,"currency":"EUR","note":"second"}`), "Idempotency-Key", key)
		other := send(t, "POST", gw.url+"/amounts", []byte(`{"amount":6,"currency":"EUR","note":"first"}`), "Idempotency-Key", key)
		if same.status != 201 || same.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("unselected field change: %d, want replay", same.status)
		}
		if other.status != 422 {
			t.Errorf("selected field change: %d, want 422", other.status)
		}
		if got := up.count("/amounts") - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1", got)
		}
	}},
	{"webhook keyed by body fields", func(t *testing.T, gw *gateway, up *upstream, key string) {
		path := "/hooks/deal"
		before := up.count(path)
		for attempt := 1; attempt <= 3; attempt++ {
			body := fmt.Sprintf(`{"event":{"id":%q,"type":"deal.create"},"meta":{"delivery_attempt":%d},"data":{"amount":10}}`, key, attempt)
			r := send(t, "POST", gw.url+path, []byte(body))
			if r.status != 201 {
				t.Fatalf("delivery %d: %d %s", attempt, r.status, r.body)
			}
			if attempt > 1 && r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("delivery %d not replayed", attempt)
			}
		}
		if got := up.count(path) - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1", got)
		}
		if got, want := up.seenKey(path), `"`+key+`:deal.create"`; got != want {
			t.Errorf("forwarded key %q, want %q", got, want)
		}
		// Another event type for the same event id is another operation key.
		r := send(t, "POST", gw.url+path, []byte(fmt.Sprintf(`{"event":{"id":%q,"type":"deal.update"}}`, key)))
		if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("second operation: %d replayed=%q, want a fresh execution", r.status, r.header.Get("Idempotent-Replayed"))
		}
	}},
	{"missing key", func(t *testing.T, gw *gateway, up *upstream, key string) {
		r := send(t, "POST", gw.url+"/hooks/deal", []byte(`{"event":{"type":"deal.create"}}`))
		if r.status != http.StatusBadRequest {
			t.Fatalf("required: status %d, want 400", r.status)
		}
		p := r.problem(t)
		if p["title"] != "Idempotency-Key is missing" || !strings.Contains(p["detail"].(string), "{body.event.id}:{body.event.type}") {
			t.Errorf("problem = %v", p)
		}
		before := up.count("/optional")
		for range 2 {
			if r := send(t, "POST", gw.url+"/optional", []byte(`{}`)); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
				t.Errorf("optional: %d replayed=%q, want a plain pass-through", r.status, r.header.Get("Idempotent-Replayed"))
			}
		}
		if got := up.count("/optional") - before; got != 2 {
			t.Errorf("optional route executions = %d, want 2 (unguarded)", got)
		}
	}},
	{"malformed JSON when a rule reads the body", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/hooks/x")
		r := send(t, "POST", gw.url+"/hooks/x", []byte(`{"event":{"id":"1",`))
		if r.status != http.StatusBadRequest {
			t.Fatalf("status %d, want 400", r.status)
		}
		r.problem(t)
		if up.count("/hooks/x") != before {
			t.Errorf("malformed request was forwarded")
		}
	}},
	{"body over max_body is 413", func(t *testing.T, gw *gateway, up *upstream, key string) {
		r := send(t, "POST", gw.url+"/small", bytes.Repeat([]byte("x"), 1025), "Idempotency-Key", key)
		if r.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413", r.status)
		}
		r.problem(t)
		if r := send(t, "POST", gw.url+"/small", bytes.Repeat([]byte("x"), 1024), "Idempotency-Key", key); r.status != 201 {
			t.Errorf("body of exactly max_body: %d, want 201", r.status)
		} else if !strings.Contains(string(r.body), `"content_length":1024`) {
			t.Errorf("upstream did not get the body with its length: %s", r.body)
		}
	}},
	{"invalid keys are 400", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/deals")
		for _, bad := range []string{strings.Repeat("k", 256), "tab\tinside", "caf\u00e9"} {
			r := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", bad)
			if r.status != http.StatusBadRequest {
				t.Errorf("key %q: status %d, want 400", bad, r.status)
				continue
			}
			r.problem(t)
		}
		if r := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", strings.Repeat("k", 250)+key[:5]); r.status != 201 {
			t.Errorf("255-character key: %d, want 201", r.status)
		}
		if got := up.count("/deals") - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1", got)
		}
	}},
	{"scopes keep clients apart", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/deals")
		a := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", key, "Authorization", "Bearer alice")
		b := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", key, "Authorization", "Bearer bob")
		if a.status != 201 || b.status != 201 || b.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("statuses %d, %d (second replayed=%q)", a.status, b.status, b.header.Get("Idempotent-Replayed"))
		}
		if got := up.count("/deals") - before; got != 2 {
			t.Errorf("upstream executions = %d, want 2", got)
		}
	}},
	{"409 while in flight, then replay", func(t *testing.T, gw *gateway, up *upstream, key string) {
		open := up.gate("/slow")
		defer open()
		first := make(chan response, 1)
		go func() { first <- send(t, "POST", gw.url+"/slow", []byte(`{}`), "Idempotency-Key", key) }()
		waitFor(t, func() bool { return up.count("/slow") == 1 })
		r := send(t, "POST", gw.url+"/slow", []byte(`{}`), "Idempotency-Key", key)
		if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" {
			t.Fatalf("status %d Retry-After %q, want 409 with Retry-After", r.status, r.header.Get("Retry-After"))
		}
		if p := r.problem(t); p["title"] != "A request is outstanding for this Idempotency-Key" {
			t.Errorf("problem = %v", p)
		}
		open()
		f := <-first
		replayed := send(t, "POST", gw.url+"/slow", []byte(`{}`), "Idempotency-Key", key)
		if f.status != 201 || replayed.status != 201 || !bytes.Equal(f.body, replayed.body) || replayed.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("after completion: first %d, retry %d replayed=%q", f.status, replayed.status, replayed.header.Get("Idempotent-Replayed"))
		}
		if up.count("/slow") != 1 {
			t.Errorf("upstream executions = %d, want 1", up.count("/slow"))
		}
	}},
	{"forwarded key header", func(t *testing.T, gw *gateway, up *upstream, key string) {
		send(t, "POST", gw.url+"/deals", nil, "Idempotency-Key", key)
		// A Structured Field string, as the IETF Idempotency-Key draft
		// requires of a client.
		if got, want := up.seenKey("/deals"), `"`+key+`"`; got != want {
			t.Errorf("upstream saw Idempotency-Key %q, want %q", got, want)
		}
	}},
	{"structured field string key", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/deals")
		quoted := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", `"`+key+`"`)
		bare := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", key)
		if quoted.status != 201 || bare.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("quoted %d, bare replayed=%q: want one key", quoted.status, bare.header.Get("Idempotent-Replayed"))
		}
		if got := up.count("/deals") - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1", got)
		}
	}},
	{"unmatched and safe requests pass through", func(t *testing.T, gw *gateway, up *upstream, key string) {
		for _, req := range []struct{ method, path string }{{"POST", "/elsewhere"}, {"GET", "/deals"}, {"POST", "/deals/sub"}} {
			before := up.count(req.path)
			for range 2 {
				r := send(t, req.method, gw.url+req.path, []byte(`{}`), "Idempotency-Key", key)
				if r.header.Get("Idempotent-Replayed") != "" || r.status != 201 {
					t.Errorf("%s %s: %d replayed=%q", req.method, req.path, r.status, r.header.Get("Idempotent-Replayed"))
				}
			}
			if got := up.count(req.path) - before; got != 2 {
				t.Errorf("%s %s: upstream calls = %d, want 2", req.method, req.path, got)
			}
		}
	}},
	{"binary body replays byte for byte", func(t *testing.T, gw *gateway, up *upstream, key string) {
		first := send(t, "POST", gw.url+"/binary", nil, "Idempotency-Key", key)
		second := send(t, "POST", gw.url+"/binary", nil, "Idempotency-Key", key)
		if !bytes.Equal(first.body, binaryBody) || !bytes.Equal(second.body, binaryBody) {
			t.Fatalf("bodies %x / %x, want %x", first.body, second.body, binaryBody)
		}
		if second.header.Get("Content-Length") != fmt.Sprint(len(binaryBody)) || second.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay headers %v", second.header)
		}
	}},
	{"3 MiB response streams intact", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/big")
		first := send(t, "POST", gw.url+"/big", nil, "Idempotency-Key", key)
		if first.status != 200 || !bytes.Equal(first.body, bigBody) {
			t.Fatalf("status %d, %d bytes; want 200 and the 3 MiB body intact", first.status, len(first.body))
		}
		second := send(t, "POST", gw.url+"/big", nil, "Idempotency-Key", key)
		if second.status != 200 || second.header.Get("Idempotent-Replayed") != "true" || second.header.Get("Idempotent-Body-Omitted") != "true" || len(second.body) != 0 {
			t.Errorf("replay of an oversized response: %d, %d bytes, headers %v", second.status, len(second.body), second.header)
		}
		if got := up.count("/big") - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1", got)
		}
	}},
	{"retry statuses release the key", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/status/429")
		for range 2 {
			if r := send(t, "POST", gw.url+"/status/429", []byte(`{}`), "Idempotency-Key", key); r.status != 429 {
				t.Errorf("status %d, want 429", r.status)
			}
		}
		if got := up.count("/status/429") - before; got != 2 {
			t.Errorf("upstream executions = %d, want 2 (429 means not done)", got)
		}
		// Another target is another operation: a key of its own (the
		// same key would be a 422, see TestRequestTargetIsIdentity).
		before = up.count("/status/400")
		send(t, "POST", gw.url+"/status/400", []byte(`{}`), "Idempotency-Key", key+"-400")
		r := send(t, "POST", gw.url+"/status/400", []byte(`{}`), "Idempotency-Key", key+"-400")
		if r.status != 400 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("400 not stored: %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
		}
		if got := up.count("/status/400") - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1", got)
		}
	}},
	{"5xx is held as outcome unknown", func(t *testing.T, gw *gateway, up *upstream, key string) {
		before := up.count("/status/500")
		first := send(t, "POST", gw.url+"/status/500", []byte(`{}`), "Idempotency-Key", key)
		second := send(t, "POST", gw.url+"/status/500", []byte(`{}`), "Idempotency-Key", key)
		if first.status != 500 || second.status != http.StatusConflict {
			t.Fatalf("statuses %d, %d; want 500 then 409", first.status, second.status)
		}
		p := second.problem(t)
		if !strings.Contains(p["type"].(string), "outcome-unknown") || p["record_id"] == "" {
			t.Errorf("problem = %v", p)
		}
		if got := up.count("/status/500") - before; got != 1 {
			t.Errorf("upstream executions = %d, want 1", got)
		}
	}},
}

// TestClientDisconnectDoesNotCancel: a client that hangs up mid-call does
// not cancel the upstream call; its result is stored and the retry
// replays it.
func TestClientDisconnectDoesNotCancel(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: behaviourRules})
	open := up.gate("/slow")
	defer open()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", gw.url+"/slow", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "hang-up")
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, func() bool { return up.count("/slow") == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the client's request was not cancelled")
	}
	open()
	waitFor(t, func() bool {
		r := send(t, "POST", gw.url+"/slow", []byte(`{}`), "Idempotency-Key", "hang-up")
		return r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true"
	})
	if got := up.count("/slow"); got != 1 {
		t.Errorf("upstream executions = %d, want 1", got)
	}
}
