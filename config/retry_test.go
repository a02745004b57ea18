package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

const retryRules = `defaults:
  owner: platform-team
  keep_headers: [x-tenant]
  retry: { max_executions: 4, breaker: { failures: 5, cool_down: 30s } }
routes:
  - name: create_crm_deal
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    owner: payments-team
    retry: { max_executions: 3 }
    keep_request: true
    keep_headers: [X-Request-Source, X-TENANT]
    redrive_headers: { authorization: "Bearer {env.CRM_TOKEN}", X-Source: redrive }
  - name: plain
    match: { path: /plain }
    key: ["{header.Idempotency-Key}"]
    retry: { breaker: { failures: 2, cool_down: 1m } }
`

func TestRecoveryResolve(t *testing.T) {
	r, err := Parse("r.yaml", []byte(retryRules), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		route   Resolved
		max     int
		breaker *BreakerRule
		owner   string
		keep    bool
		headers []Header
		kept    []string
	}{
		{res[0], 3, &BreakerRule{5, 30 * time.Second}, "payments-team", true,
			[]Header{{"Authorization", "Bearer {env.CRM_TOKEN}"}, {"X-Source", "redrive"}}, []string{"X-Tenant", "X-Request-Source"}},
		{res[1], 4, &BreakerRule{2, time.Minute}, "platform-team", false, nil, []string{"X-Tenant"}},
	} {
		got := tt.route
		if got.MaxExecutions != tt.max || !reflect.DeepEqual(got.Breaker, tt.breaker) || got.Owner != tt.owner ||
			got.KeepRequest != tt.keep || !reflect.DeepEqual(got.RedriveHeaders, tt.headers) || !reflect.DeepEqual(got.KeepHeaders, tt.kept) {
			t.Errorf("%s: max %d breaker %+v owner %q keep %v headers %+v kept %q", got.Name, got.MaxExecutions, got.Breaker, got.Owner, got.KeepRequest, got.RedriveHeaders, got.KeepHeaders)
		}
	}
	plain, _ := (&Rules{Routes: []Route{{Name: "a", Match: Match{Path: "/a"}, Key: []string{"{header.K}"}}}}).Resolve(Limits{})
	if p := plain[0]; p.MaxExecutions != 5 || p.Breaker != nil || p.Owner != "" || p.KeepRequest || p.RedriveHeaders != nil || p.KeepHeaders != nil {
		t.Errorf("built-in defaults: %+v", p)
	}

	// Caddy's JSON has the same schema.
	again, b := jsonRoundTrip(t, r)
	if !reflect.DeepEqual(again, res) {
		t.Errorf("JSON round trip differs: %s", b)
	}
	if !strings.Contains(string(b), `"retry":{"max_executions":3}`) || !strings.Contains(string(b), `"breaker":{"failures":5,"cool_down":"30s"}`) {
		t.Errorf("JSON shape: %s", b)
	}
}

func TestRecoveryErrors(t *testing.T) {
	head := "routes:\n  - name: r\n    match: { path: /r }\n    key: [\"{header.K}\"]\n"
	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"budget and breaker", head + "    retry:\n      max_executions: 0\n      breaker: { failures: 0 }\n", []string{
			`r.yaml:6: routes[0].retry.max_executions: must be from 1 to 1000, got 0`,
			`r.yaml:7: routes[0].retry.breaker.failures: must be from 1 to 10000, got 0 (how many consecutive failures open the breaker)`,
			`r.yaml:7: routes[0].retry.breaker.cool_down: is required, e.g. 30s: how long the breaker stays open`,
		}},
		{"cool down too short", "defaults:\n  retry: { breaker: { failures: 3, cool_down: 100ms } }\n" + head, []string{
			`r.yaml:2: defaults.retry.breaker.cool_down: must be from 1s to 24h0m0s, got 100ms`,
		}},
		{"max executions of the wrong kind", head + "    retry: { max_executions: many }\n", []string{
			`r.yaml:5: routes[0].retry.max_executions: must be an integer, not the string "many"`,
		}},
		{"owner", head + "    owner: \"\"\n", []string{
			`r.yaml:5: routes[0].owner: must not be empty (leave it out to name no owner)`,
		}},
		{"owner with a line break", head + "    owner: \"a\\nb\"\n", []string{
			`r.yaml:5: routes[0].owner: "a\nb" is not an owner: 1 to 128 characters, no control characters or surrounding spaces`,
		}},
		{"keep request of the wrong kind", head + "    keep_request: yes please\n", []string{
			`r.yaml:5: routes[0].keep_request: must be true or false, not the string "yes please"`,
		}},
		{"redrive headers", head + "    redrive_headers: { Host: x, X-A: \"{header.Authorization}\", x-b: a, X-B: b }\n", []string{
			`r.yaml:5: routes[0].redrive_headers.Host: Host is set by the gateway itself and may not be configured`,
			`r.yaml:5: routes[0].redrive_headers.X-A: placeholder {header.Authorization}: headers take static text and {env.NAME} only (they are filled in when the check runs, and never stored)`,
			`r.yaml:5: routes[0].redrive_headers.x-b: is the same header as "X-B" (header names are case-insensitive)`,
		}},
		{"keep headers", head + "    keep_headers: [X-Trace, \"x trace\", x-trace, Cookie, proxy-authorization, Content-Length, Connection, Proxy-Connection]\n", []string{
			`r.yaml:5: routes[0].keep_headers[1]: "x trace" is not a valid header name`,
			`r.yaml:5: routes[0].keep_headers[2]: "x-trace" is already named at [0] (header names are case-insensitive)`,
			`r.yaml:5: routes[0].keep_headers[3]: Cookie carries the caller's credentials, which are never kept: give a re-drive the gateway's own with redrive_headers`,
			`r.yaml:5: routes[0].keep_headers[4]: Proxy-Authorization carries the caller's credentials, which are never kept: give a re-drive the gateway's own with redrive_headers`,
			`r.yaml:5: routes[0].keep_headers[5]: Content-Length is set by the gateway itself and is never kept`,
			`r.yaml:5: routes[0].keep_headers[6]: Connection is set by the gateway itself and is never kept`,
			`r.yaml:5: routes[0].keep_headers[7]: Proxy-Connection is set by the gateway itself and is never kept`,
		}},
		{"keep headers of the wrong kind", head + "    keep_headers: X-Trace\n", []string{
			`r.yaml:5: routes[0].keep_headers: must be a list of strings, not the string "X-Trace"`,
		}},
		{"unknown field", head + "    retry: { max_execution: 3 }\n", []string{
			`r.yaml:5: routes[0].retry.max_execution: unknown field; did you mean max_executions?`,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { wantParseErrors(t, tt.yaml, tt.want) })
	}
}
