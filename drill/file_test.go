package drill

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
)

// goodFile is a valid drill file; the error cases change one thing in it.
const goodFile = `upstream: http://127.0.0.1:9001
rules: routes.yaml
route: create_crm_deal
request:
  path: /crm/deals
  headers:
    Idempotency-Key: "drill-{run}-{n}"
    Authorization: "Bearer {env.CRM_TOKEN}"
  body: '{"amount": 100}'
count:
  url: "http://127.0.0.1:9001/crm/deals?source_key={key}"
  headers: { Authorization: "Bearer {env.CRM_TOKEN}" }
  path: "#"
invalid:
  set: { amount: "a lot" }
`

func TestParse(t *testing.T) {
	f, err := Parse("dir/d.yaml", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if f.Rules != "dir/routes.yaml" || f.Request.Method != "POST" || f.Parallel != defaultParallel || len(f.Scenarios) != len(scenarioNames) {
		t.Errorf("defaults not filled in: %+v", f)
	}
}

func TestParseOrdersScenarios(t *testing.T) {
	f, err := Parse("d.yaml", []byte(goodFile+"scenarios: [gateway_restart, parallel, double_delivery]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Scenarios, ","); got != "double_delivery,parallel,gateway_restart" {
		t.Errorf("scenarios run as %s", got)
	}
}

// TestRunNeedsConsent: without -yes and without a terminal the drill
// prints its plan and runs nothing; on a terminal, only "yes" runs it.
func TestRunNeedsConsent(t *testing.T) {
	t.Setenv("CRM_TOKEN", "s3cr3t-drill-token")
	dir := t.TempDir()
	file := dir + "/d.yaml"
	text := strings.Replace(goodFile, "rules: routes.yaml", "rules: "+exampleDir(t)+"/routes.yaml", 1)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tty   bool
		input string
		want  string
	}{
		{false, "yes\n", "not run: pass -yes, or run it on a terminal to confirm"},
		{true, "y\n", "Run the drill? Type yes: idemgate drill: not run"},
	} {
		var out, errs strings.Builder
		code := Run(Options{File: file, Gateway: "/nonexistent", Stdin: strings.NewReader(tc.input), IsTTY: tc.tty, Out: &out, Err: &errs})
		if code != ExitCannot || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("tty %v: exit %d, stderr %q", tc.tty, code, errs.String())
		}
		plan := out.String()
		for _, want := range []string{"target:   127.0.0.1:9001", "This creates real records in 127.0.0.1:9001: 9 operations", "lost_answer"} {
			if !strings.Contains(plan, want) {
				t.Errorf("the plan lacks %q:\n%s", want, plan)
			}
		}
		if strings.Contains(plan+errs.String(), "s3cr3t") || strings.Contains(plan, "Bearer") {
			t.Errorf("the plan shows a credential header:\n%s", plan)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct {
		name, old, new, want string
	}{
		{"unknown field", "route: create_crm_deal", "route: create_crm_deal\nroutes: x", `d.yaml:4: routes: unknown field; did you mean route?`},
		{"upstream not a URL", "upstream: http://127.0.0.1:9001", "upstream: 127.0.0.1:9001", `d.yaml:1: upstream: "127.0.0.1:9001" is not an http:// or https:// URL`},
		{"upstream with a path", "upstream: http://127.0.0.1:9001", "upstream: http://127.0.0.1:9001/crm", `d.yaml:1: upstream: is the API's base URL (scheme and host): the path goes in request.path`},
		{"credentials in a URL", "upstream: http://127.0.0.1:9001", "upstream: http://u:p@127.0.0.1:9001", `d.yaml:1: upstream: must not hold credentials: send them in headers with {env.NAME}`},
		{"unset env in upstream", "upstream: http://127.0.0.1:9001", `upstream: "{env.IDEMGATE_DRILL_TEST_UNSET}"`, `is not an http:// or https:// URL once its {env.NAME} are filled in (is the variable set?)`},
		{"no rules", "rules: routes.yaml\n", "", `d.yaml:1: rules: is required: the route rules file the gateway runs with`},
		{"path without slash", "path: /crm/deals", "path: crm/deals", `d.yaml:5: request.path: is required and starts with /`},
		{"GET", "request:\n", "request:\n  method: GET\n", `d.yaml:5: request.method: GET is never guarded: drill an operation that changes something`},
		{"no {n}", `"drill-{run}-{n}"`, `"drill-{run}"`, `d.yaml:4: request: must use {run} and {n}`},
		{"unknown placeholder", `'{"amount": 100}'`, `'{"amount": {body.x}}'`, `d.yaml:9: request.body: placeholder {body.x}: request.body takes {run}, {n}, {env.NAME}`},
		{"key in a header", `headers: { Authorization: "Bearer {env.CRM_TOKEN}" }`, `headers: { Authorization: "Bearer {key}" }`, `d.yaml:12: count.headers.Authorization: placeholder {key}: count.headers.Authorization takes {env.NAME}`},
		{"count without key", "source_key={key}", "source_key=x", `d.yaml:11: count.url: must hold {key}, the operation's idempotency key`},
		{"count without path", `  path: "#"`, "", `d.yaml:10: count.path: is required`},
		{"number for a string", "route: create_crm_deal", "route: 12", `d.yaml:3: route: must be a string, not 12 (quote it to make it a string)`},
		{"unknown scenario", "invalid:", "scenarios: [double_delivery, lost_answers]\ninvalid:", `d.yaml:14: scenarios[1]: unknown scenario "lost_answers"; the scenarios are double_delivery,`},
		{"scenario twice", "invalid:", "scenarios: [parallel, parallel]\ninvalid:", `d.yaml:14: scenarios[1]: parallel is listed twice`},
		{"parallel out of range", "invalid:", "parallel: 1000\ninvalid:", `d.yaml:14: parallel: must be 2 to 100, not 1000`},
		{"no invalid", "invalid:\n  set: { amount: \"a lot\" }\n", "", `d.yaml:1: invalid: is required for the invalid_field scenario`},
		{"invalid with both", `set: { amount: "a lot" }`, "set: { amount: \"a lot\" }\n  body: x", `d.yaml:14: invalid: takes set or body, not both`},
		{"redis not a URL", "invalid:", "redis: localhost:6379\ninvalid:", `d.yaml:14: redis: must be a redis:// or rediss:// URL`},
		{"not a mapping", goodFile, "- a\n- b\n", `d.yaml:1: the drill file must be a mapping with upstream, rules, route and request, not a list`},
		{"bad YAML", "route: create_crm_deal", "route: [create", `d.yaml:`},
		{"two documents", goodFile, goodFile + "---\nx: 1\n", `d.yaml:17: a second YAML document; the drill file must be one document`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			text := strings.Replace(goodFile, tt.old, tt.new, 1)
			if text == goodFile {
				t.Fatalf("the case changes nothing")
			}
			_, err := Parse("d.yaml", []byte(text))
			var list config.ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error %v is not a config.ErrorList", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error\n%v\nlacks\n%s", err, tt.want)
			}
		})
	}
}

// FuzzParse: Parse never panics, and every problem it reports names the
// file and a line or a field.
func FuzzParse(f *testing.F) {
	f.Add([]byte(goodFile))
	f.Add([]byte("upstream: &a http://x\nrules: *a\n"))
	f.Add([]byte("request: {path: '/{n}{run}', headers: {A: '{env.'}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("f.yaml", data)
		if err == nil {
			if file == nil || file.Request.Method == "" || len(file.Scenarios) == 0 {
				t.Fatalf("Parse accepted a file without its defaults: %+v", file)
			}
			return
		}
		var list config.ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			t.Fatalf("error is not a non-empty ErrorList: %#v", err)
		}
		for _, e := range list {
			if e.File != "f.yaml" || (e.Line <= 0 && e.Field == "") || e.Msg == "" {
				t.Errorf("unlocated problem: %#v", e)
			}
		}
	})
}
