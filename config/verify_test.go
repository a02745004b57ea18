package config

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
)

const verifyRules = `routes:
  - name: create_crm_deal
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}", "{body.id}"]
    verify:
      url: "{env.CRM_URL}/crm/deals?source_key={key}&event={body.id}"
      headers: { Authorization: "Bearer {env.CRM_TOKEN}", X-Static: "demo" }
      found: { status: [200], id: "0.id", object: "0", match: { "0.source_key": "{key}", 0.event: "{body.id}" } }
      replay_status: 201
  - name: tuned
    match: { path: /tuned }
    key: ["{header.Idempotency-Key}"]
    on_unknown_outcome: store
    verify:
      url: "https://crm.example/deals/by-key/{key_id}"
      method: get
      timeout: 500ms
      found: { status: [200, 203], id: "id" }
      not_found: { status: [404, 410] }
      after: 100ms
      every: 300ms
      attempts: 0
      not_found_checks: 3
`

func TestVerifyResolve(t *testing.T) {
	r, err := Parse("r.yaml", []byte(verifyRules), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	v := res[0].Verify
	if v == nil {
		t.Fatal("no verify rule")
	}
	u, _ := keying.ParseURLTemplate("{env.CRM_URL}/crm/deals?source_key={key}&event={body.id}")
	want := &VerifyRule{
		URL: u, Method: "GET",
		Headers: []VerifyHeader{{"Authorization", "Bearer {env.CRM_TOKEN}"}, {"X-Static", "demo"}},
		Timeout: 2 * time.Second, After: 2 * time.Second, Every: 10 * time.Second,
		Attempts: 5, NotFoundChecks: 2,
		FoundStatus: []int{200}, FoundID: "0.id", NotFoundStatus: []int{404},
		ReplayStatus: 201, FoundObject: "0",
		FoundMatch: []VerifyMatch{{"0.event", keying.MustParseMatchTemplate("{body.id}")}, {"0.source_key", keying.MustParseMatchTemplate("{key}")}},
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", v, want)
	}
	v = res[1].Verify
	if v.Method != "GET" || v.Timeout != 500*time.Millisecond || v.After != 100*time.Millisecond ||
		v.Every != 300*time.Millisecond || v.Attempts != 0 || v.NotFoundChecks != 3 ||
		!reflect.DeepEqual(v.FoundStatus, []int{200, 203}) || !reflect.DeepEqual(v.NotFoundStatus, []int{404, 410}) ||
		!v.Found(203) || v.Found(404) || !v.NotFound(410) || v.ReplayStatus != 0 || v.FoundObject != "" || v.FoundMatch != nil {
		t.Errorf("tuned: %+v", v)
	}
	if plain, _ := (&Rules{Routes: []Route{{Name: "a", Match: Match{Path: "/a"}, Key: []string{"{header.K}"}}}}).Resolve(Limits{}); plain[0].Verify != nil {
		t.Errorf("a route without verify resolved one: %+v", plain[0].Verify)
	}

	// JSON (Caddy's config) has the same schema.
	again, b := jsonRoundTrip(t, r)
	if !reflect.DeepEqual(again, res) {
		t.Errorf("JSON round trip:\n got %+v\nwant %+v\njson %s", again[0].Verify, res[0].Verify, b)
	}
	if !strings.Contains(string(b), `"verify":{"url":"{env.CRM_URL}/crm/deals?source_key={key}\u0026event={body.id}"`) {
		t.Errorf("JSON shape: %s", b)
	}
}

func TestVerifyErrors(t *testing.T) {
	head := "routes:\n  - name: r\n    match: { path: /r }\n    key: [\"{header.K}\"]\n"
	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"no url and no found id", head + "    verify: { method: GET }\n", []string{
			`r.yaml:5: routes[0].verify.url: is required, e.g. "{env.CRM_URL}/crm/deals?source_key={key}"`,
			`r.yaml:5: routes[0].verify.found.id: is required: the JSON path of the external id in the lookup's answer, e.g. "0.id"`,
		}},
		{"release", head + "    on_unknown_outcome: release\n    verify:\n      url: http://crm/x?k={key}\n      found: { id: id }\n", []string{
			`r.yaml:6: routes[0].verify: needs on_unknown_outcome hold or store (the route says release): under release nothing is held to verify`,
		}},
		{"release by default", "defaults: { on_unknown_outcome: release }\n" + head + "    verify:\n      url: http://crm/x?k={key}\n      found: { id: id }\n", []string{
			`r.yaml:6: routes[0].verify: needs on_unknown_outcome hold or store (the route inherits release from defaults.on_unknown_outcome): under release nothing is held to verify`,
		}},
		{"bad fields", head + `    verify:
      url: "ftp://crm/x?k={key}"
      method: "G T"
      headers: { Host: crm, X-A: "{header.Authorization}", X-B: "a{env.1X}" }
      timeout: 2m
      found: { status: [200, 700], id: id }
      not_found: { status: [200] }
      attempts: 101
      not_found_checks: 0
      replay_status: 100
`, []string{
			`r.yaml:6: routes[0].verify.url: "ftp://crm/x?k={key}" is not an absolute http or https URL (or one whose base is an {env.NAME} placeholder)`,
			`r.yaml:7: routes[0].verify.method: "G T" is not an HTTP method`,
			`r.yaml:8: routes[0].verify.headers.Host: Host is set by the gateway itself and may not be configured`,
			`r.yaml:8: routes[0].verify.headers.X-A: placeholder {header.Authorization} copies the caller's credentials: headers take static text and {env.NAME} only (they are filled in when the check runs, and never stored)`,
			`r.yaml:8: routes[0].verify.headers.X-B: placeholder {env.1X}: headers take static text and {env.NAME} only (they are filled in when the check runs, and never stored)`,
			`r.yaml:9: routes[0].verify.timeout: must be at most 1m0s, got 2m0s: a retry waits for its check`,
			`r.yaml:10: routes[0].verify.found.status[1]: 700 is not an HTTP status (100 to 599)`,
			`r.yaml:11: routes[0].verify.not_found.status[0]: 200 is also a found status: a found status with nothing at found.id already means not found`,
			`r.yaml:12: routes[0].verify.attempts: must be from 0 to 100, got 101`,
			`r.yaml:13: routes[0].verify.not_found_checks: must be from 1 to 20, got 0`,
			`r.yaml:14: routes[0].verify.replay_status: 100 is not a final HTTP status (200 to 599)`,
		}},
		{"zero duration", head + "    verify:\n      url: http://crm/{key}\n      found: { id: id }\n      after: 0s\n", []string{
			`r.yaml:8: routes[0].verify.after: must be positive, got 0s (leave the field out to inherit the default)`,
		}},
		{"headers differ only in case", head + "    verify:\n      url: http://crm/{key}\n      found: { id: id }\n      headers:\n        Authorization: a\n        authorization: b\n", []string{
			`r.yaml:10: routes[0].verify.headers.authorization: is the same header as "Authorization" (header names are case-insensitive)`,
		}},
		{"headers of the wrong kind", head + "    verify:\n      url: http://crm/{key}\n      found: { id: id }\n      headers: [a]\n", []string{
			`r.yaml:8: routes[0].verify.headers: must be a mapping of names to strings, not a list`,
		}},
		{"a header value of the wrong kind", head + "    verify:\n      url: http://crm/{key}\n      found: { id: id }\n      headers: { X-N: 5 }\n", []string{
			`r.yaml:8: routes[0].verify.headers.X-N: must be a string, not 5 (quote it to make it a string)`,
		}},
		{"url placeholders", head + "    verify:\n      url: \"http://crm/{nope}\"\n      found: { id: id }\n", []string{
			`r.yaml:6: routes[0].verify.url: "http://crm/{nope}": placeholder {nope}: "nope" has no source (want {header.NAME}, {query.NAME}, {form.NAME} or {body.PATH}) (or {key}, {record_id}, {env.NAME})`,
		}},
		{"caller credentials", "defaults: { scope: [\"{header.X-Api-Key}:{query.tenant}\"] }\n" + head + `    verify:
      url: "http://crm/x?k={key}&a={header.Authorization}&b={header.x-api-key}&c={query.tenant}&d={query.access_token}&e={header.Cookie}"
      headers: { X-A: "{http.request.header.Authorization}", X-B: "{cookie.sid}" }
      found:
        id: id
        match: { a: "{header.Proxy-Authorization}", b: "{body.client_secret}", c: "{key}" }
`, []string{
			`r.yaml:7: routes[0].verify.url: placeholder {header.Authorization} copies the caller's credentials (the Authorization header), and the resolved URL is stored on the record and shown to operators: give the lookup its own in verify.headers with {env.NAME}`,
			`r.yaml:7: routes[0].verify.url: placeholder {header.x-api-key} copies the caller's credentials (the route's scope uses it), and the resolved URL is stored on the record and shown to operators: give the lookup its own in verify.headers with {env.NAME}`,
			`r.yaml:7: routes[0].verify.url: placeholder {query.tenant} copies the caller's credentials (the route's scope uses it), and the resolved URL is stored on the record and shown to operators: give the lookup its own in verify.headers with {env.NAME}`,
			`r.yaml:7: routes[0].verify.url: placeholder {query.access_token} copies the caller's credentials (its name says so), and the resolved URL is stored on the record and shown to operators: give the lookup its own in verify.headers with {env.NAME}`,
			`r.yaml:7: routes[0].verify.url: placeholder {header.Cookie} copies the caller's credentials (the Cookie header), and the resolved URL is stored on the record and shown to operators: give the lookup its own in verify.headers with {env.NAME}`,
			`r.yaml:8: routes[0].verify.headers.X-A: placeholder {http.request.header.Authorization} copies the caller's credentials: headers take static text and {env.NAME} only (they are filled in when the check runs, and never stored)`,
			`r.yaml:8: routes[0].verify.headers.X-B: placeholder {cookie.sid} copies the caller's credentials: headers take static text and {env.NAME} only (they are filled in when the check runs, and never stored)`,
			`r.yaml:11: routes[0].verify.found.match.a: placeholder {header.Proxy-Authorization} copies the caller's credentials (the Proxy-Authorization header), and the resolved value is stored on the record and shown to operators`,
			`r.yaml:11: routes[0].verify.found.match.b: placeholder {body.client_secret} copies the caller's credentials (its name says so), and the resolved value is stored on the record and shown to operators`,
		}},
		{"caddy placeholders in the url", head + "    verify:\n      url: \"http://crm/x?k={key}&a={http.request.header.Authorization}&b={http.request.cookie.sid}\"\n      found: { id: id }\n", []string{
			`r.yaml:6: routes[0].verify.url: placeholder {http.request.header.Authorization} copies the caller's credentials (the Authorization header), and the resolved URL is stored on the record and shown to operators: give the lookup its own in verify.headers with {env.NAME}`,
			`r.yaml:6: routes[0].verify.url: placeholder {http.request.cookie.sid} copies the caller's credentials (a cookie), and the resolved URL is stored on the record and shown to operators: give the lookup its own in verify.headers with {env.NAME}`,
		}},
		{"found object and match", head + `    verify:
      url: "http://crm/x?k={key}"
      found:
        id: id
        object: " "
        match: { "": "{key}", " ": x, a: "", b: "{nope}", c: "{env.CRM_TOKEN}", d: "has space" }
`, []string{
			`r.yaml:9: routes[0].verify.found.object: must not be an empty path (leave it out to replay the whole answer)`,
			`r.yaml:10: routes[0].verify.found.match: "": a path must not be empty`,
			`r.yaml:10: routes[0].verify.found.match: " ": a path must not be empty`,
			`r.yaml:10: routes[0].verify.found.match.a: must not be empty: a template such as "{key}"`,
			`r.yaml:10: routes[0].verify.found.match.b: "{nope}": placeholder {nope}: "nope" has no source (want {header.NAME}, {query.NAME}, {form.NAME} or {body.PATH}) (or {key}, {record_id})`,
			`r.yaml:10: routes[0].verify.found.match.c: "{env.CRM_TOKEN}": placeholder {env.CRM_TOKEN}: {env.NAME} is not allowed here (the value is compared with the answer, not sent)`,
			`r.yaml:10: routes[0].verify.found.match.d: "has space": byte 0x20 at offset 3 (literal text is visible ASCII)`,
		}},
		{"unknown field", head + "    verify:\n      url: http://crm/{key}\n      found: { id: id }\n      evry: 1s\n", []string{
			`r.yaml:8: routes[0].verify.evry: unknown field; did you mean every?`,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { wantParseErrors(t, tt.yaml, tt.want) })
	}
}

// TestVerifyURLHostIsStatic: the scheme, host and port of verify.url are
// static text or {env.NAME}. A request placeholder there (the key, the
// record id, a header, a query parameter, a body field), in the userinfo
// too, would send the lookup and the credentials of its headers where a
// caller says, and let that host's answer decide "applied": a config
// error naming file, line and field. Placeholders in the path and query
// stay allowed (they are escaped; see keying.TestURLTemplateEscapes).
func TestVerifyURLHostIsStatic(t *testing.T) {
	head := "routes:\n  - name: r\n    match: { path: /r }\n    key: [\"{header.K}\"]\n    verify:\n      found: { id: id }\n      headers: { Authorization: \"Bearer {env.CRM_TOKEN}\" }\n      url: "
	const why = `is in the scheme, host or port: those take static text and {env.NAME} only (a request value there would send the lookup, with its credentials, where the caller says, and let that host decide "applied")`
	for _, tt := range []struct{ url, placeholder string }{
		{`"http://{body.host}:25009/lookup?source_key={key}"`, "body.host"},
		{`"http://{header.X-Crm-Host}/lookup?k={key}"`, "header.X-Crm-Host"},
		{`"http://{query.host}/lookup?k={key}"`, "query.host"},
		{`"http://{form.host}/lookup"`, "form.host"},
		{`"http://{key}.crm.example/lookup"`, "key"},
		{`"http://{key_id}/lookup"`, "key_id"},
		{`"http://{record_id}.crm.example/lookup"`, "record_id"},
		{`"http://crm.example:{body.port}/lookup"`, "body.port"},
		{`"http://{body.user}@crm.example/lookup"`, "body.user"},
		{`"http://crm.example@{body.host}/lookup"`, "body.host"},
		{`"https://crm.example{body.suffix}/lookup"`, "body.suffix"},
		{`"{env.CRM_URL}{body.suffix}/lookup"`, "body.suffix"},
		{`"{env.CRM_URL}{key}"`, "key"},
		{`"http://{env.CRM_HOST}:{body.port}/lookup"`, "body.port"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			u := strings.Trim(tt.url, `"`)
			wantParseErrors(t, head+tt.url+"\n", []string{
				`r.yaml:8: routes[0].verify.url: ` + strconv.Quote(u) + `: placeholder {` + tt.placeholder + `} ` + why,
			})
		})
	}
	for _, u := range []string{
		"http://{env.CRM_HOST}:25009/lookup?source_key={key}",
		"http://{env.CRM_HOST}:{env.CRM_PORT}/lookup/{body.id}?source_key={key}",
		"{env.CRM_URL}/lookup/{key_id}?h={header.X-Tenant}&q={query.q}#{body.id}",
		"{env.CRM_URL}?source_key={key}",
		"https://crm.example/deals/{body.deal.id}?k={key}",
	} {
		if _, err := Parse("r.yaml", []byte(head+strconv.Quote(u)+"\n"), Limits{}); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}
