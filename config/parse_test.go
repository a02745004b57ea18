package config

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// route is a valid route entry for building test documents.
const route = `  - name: create_crm_deal
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
`

func TestLoadNamesFileLineAndField(t *testing.T) {
	t.Chdir("testdata/bad")
	_, err := Load("routes.yaml", Limits{})
	want := `routes.yaml:9: routes[1].on_unknown_outcome: "maybe" is not one of hold, release, store`
	if err == nil || err.Error() != want {
		t.Fatalf("Load error:\n got %v\nwant %s", err, want)
	}
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 {
		t.Fatalf("error is not a one-entry ErrorList: %#v", err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("errors.As(*Error) failed")
	}
	if *e != (Error{File: "routes.yaml", Line: 9, Field: "routes[1].on_unknown_outcome",
		Msg: `"maybe" is not one of hold, release, store`}) {
		t.Errorf("Error = %#v", *e)
	}
}

func TestLoad(t *testing.T) {
	r, err := Load("testdata/minimal.yaml", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Routes) != 1 || r.Routes[0].Name != "create_crm_deal" {
		t.Fatalf("routes = %+v", r.Routes)
	}
	_, err = Load("testdata/no-such-file.yaml", Limits{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want fs.ErrNotExist", err)
	}
}

// parseErrorTests are invalid documents and the exact errors Parse
// reports for them (also the fuzz test's seeds).
var parseErrorTests = []struct {
	name string
	yaml string
	want []string // the lines of err.Error()
}{
	{"empty file", ``,
		[]string{`r.yaml: routes: at least one route is required`}},
	{"only comments", "# nothing here\n",
		[]string{`r.yaml: routes: at least one route is required`}},
	{"no routes", "defaults:\n  ttl: 1h\nroutes: []\n",
		[]string{`r.yaml:3: routes: at least one route is required`}},
	{"show_unparsed_bodies not a bool", "defaults:\n  show_unparsed_bodies: yes\nroutes:\n  - name: a\n    match: { path: /a }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:2: defaults.show_unparsed_bodies: must be true or false, not the string "yes"`}},
	{"empty redact field", "defaults:\n  redact_fields: [card, \"\"]\nroutes:\n  - name: a\n    match: { path: /a }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:2: defaults.redact_fields[1]: "" is not a field name (1 to 128 characters, no control characters)`}},
	{"not a mapping", "- name: x\n",
		[]string{`r.yaml:1: the rules must be a mapping with defaults and routes, not a list`}},
	{"scalar document", "just text\n",
		[]string{`r.yaml:1: the rules must be a mapping with defaults and routes, not the string "just text"`}},
	{"two documents", "routes:\n" + route + "---\nroutes: []\n",
		[]string{`r.yaml:6: a second YAML document; the rules must be one document`}},
	{"syntax error", "routes:\n  - name: a\n    key: [\"{header.K}\"\n    ttl: 1h\n",
		[]string{`r.yaml:3: invalid YAML: did not find expected ',' or ']'`}},
	{"unclosed flow mapping", "routes:\n  - name: a\n    match: {path: /a\n",
		[]string{`r.yaml:3: invalid YAML: did not find expected ',' or '}'`}},
	{"key outdented", "defaults:\n  ttl: 1h\n routes: x\n",
		[]string{`r.yaml:3: invalid YAML: did not find expected key`}},
	{"unterminated quote", "routes:\n  - name: 'a\n",
		[]string{`r.yaml:2: invalid YAML: found unexpected end of stream`}},
	{"unknown anchor", "routes:\n  - *route\n",
		[]string{`r.yaml:2: invalid YAML: unknown anchor 'route' referenced`}},
	{"bad indentation", "routes:\n  - name: a\n     match: x\n",
		[]string{`r.yaml:3: invalid YAML: mapping values are not allowed in this context`}},
	{"tab indentation", "routes:\n\t- name: a\n",
		[]string{`r.yaml:2: invalid YAML: found character that cannot start any token`}},
	{"control character", "routes:\n" + route + "    external_id: \"a\"\x01\n",
		[]string{`r.yaml:5: invalid YAML: control characters are not allowed`}},

	// Unknown, misspelt and repeated fields.
	{"unknown route field", "routes:\n" + route + "    nmae: x\n",
		[]string{`r.yaml:5: routes[0].nmae: unknown field; did you mean name?`}},
	{"unknown match field", "routes:\n  - name: a\n    match: { path: /a, methds: [POST] }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:3: routes[0].match.methds: unknown field; did you mean methods?`}},
	{"unknown top-level field", "route:\n" + route,
		[]string{`r.yaml:1: route: unknown field; did you mean routes?`,
			`r.yaml:1: routes: at least one route is required`}},
	{"unknown defaults field, no suggestion", "defaults:\n  color: blue\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.color: unknown field`}},
	{"dotted key is not a path", "routes:\n" + route + "    match.path: /b\n",
		[]string{`r.yaml:5: routes[0].match.path: unknown field`}},
	{"upper-case key", "routes:\n" + route + "    TTL: 1h\n",
		[]string{`r.yaml:5: routes[0].TTL: field names are lower case: write "ttl"`}},
	{"key set twice", "routes:\n" + route + "    ttl: 1h\n    ttl: 2h\n",
		[]string{`r.yaml:6: routes[0].ttl: is set twice (first on line 5)`}},
	{"empty key", "\"\": x\nroutes:\n" + route, // never an unexported field of Rules
		[]string{`r.yaml:1: unknown field`}},
	{"number as key", "routes:\n" + route + "    1: x\n",
		[]string{`r.yaml:5: routes[0]: 1 is not a field name`}},
	{"unknown field in merged list", "routes:\n" + route + "    <<: [{ttl: 1h}, {tll: 2h}]\n",
		[]string{`r.yaml:5: routes[0].tll: unknown field; did you mean ttl?`}},
	{"bad merge", "routes:\n" + route + "    <<: 5\n",
		[]string{`r.yaml:5: routes[0]: the merge key << needs a mapping or a list of mappings, not 5`}},

	// Wrong types.
	{"bool as string", "routes:\n" + route + "    require_key: yes\n",
		[]string{`r.yaml:5: routes[0].require_key: must be true or false, not the string "yes"`}},
	{"list as string", "routes:\n  - name: a\n    match: { path: /a, methods: POST }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:3: routes[0].match.methods: must be a list of strings, not the string "POST"`}},
	{"key as string", "routes:\n  - name: a\n    match: { path: /a }\n    key: \"{header.K}\"\n",
		[]string{`r.yaml:4: routes[0].key: must be a list of strings, not the string "{header.K}"`}},
	{"routes as mapping", "routes:\n  name: a\n",
		[]string{`r.yaml:1: routes: must be a list of mappings, not a mapping`}},
	{"defaults as list", "defaults: [1]\nroutes:\n" + route,
		[]string{`r.yaml:1: defaults: must be a mapping, not a list`}},
	{"route as scalar", "routes:\n  - create_crm_deal\n",
		[]string{`r.yaml:2: routes[0]: must be a mapping, not the string "create_crm_deal"`}},
	{"name as number", "routes:\n  - name: 2024\n    match: { path: /a }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:2: routes[0].name: must be a string, not 2024 (quote it to make it a string)`}},
	{"template as date", "routes:\n  - name: a\n    match: { path: /a }\n    key: [2024-01-02]\n",
		[]string{`r.yaml:4: routes[0].key[0]: must be a string, not the time 2024-01-02 (quote it to make it a string)`}},
	{"status as string", "routes:\n" + route + "    retry_statuses: [\"429\"]\n",
		[]string{`r.yaml:5: routes[0].retry_statuses[0]: must be an integer, not the string "429"`}},

	// Names and operations.
	{"name missing", "routes:\n  - match: { path: /a }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:2: routes[0].name: is required`}},
	{"name charset", "routes:\n  - name: create deal\n    match: { path: /a }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:2: routes[0].name: "create deal" is not a valid name: use 1 to 64 of A-Z a-z 0-9 _ . : -`}},
	{"name too long", "routes:\n  - name: " + strings.Repeat("a", 65) + "\n    match: { path: /a }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:2: routes[0].name: "` + strings.Repeat("a", 64) + `"... is not a valid name: use 1 to 64 of A-Z a-z 0-9 _ . : -`}},
	{"duplicate name", "routes:\n" + route + route,
		[]string{`r.yaml:5: routes[1].name: "create_crm_deal" is already the name of routes[0]`}},
	{"operation charset", "routes:\n" + route + "    operation: create/deal\n",
		[]string{`r.yaml:5: routes[0].operation: "create/deal" is not a valid operation: use 1 to 64 of A-Z a-z 0-9 _ . : -`}},
	{"operation empty", "routes:\n" + route + "    operation: \"\"\n",
		[]string{`r.yaml:5: routes[0].operation: must not be empty (leave it out to use the route's name)`}},
	{"external_id empty", "routes:\n" + route + "    external_id: ''\n",
		[]string{`r.yaml:5: routes[0].external_id: must not be empty (leave it out to record no external id)`}},

	// Match.
	{"match missing", "routes:\n  - name: a\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:2: routes[0].match.path: is required`}},
	{"path missing", "routes:\n  - name: a\n    match: { methods: [POST] }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:3: routes[0].match.path: is required`}},
	{"path relative", "routes:\n  - name: a\n    match: { path: crm/deals }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:3: routes[0].match.path: "crm/deals" must start with "/"`}},
	{"path bad glob", "routes:\n  - name: a\n    match: { path: \"/crm/[deals/*/x\" }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:3: routes[0].match.path: "/crm/[deals/*/x" is not a valid path pattern`}},
	{"safe method", "routes:\n  - name: a\n    match:\n      path: /a\n      methods: [POST, get]\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:5: routes[0].match.methods[1]: GET is a safe method and is never guarded; remove it`}},
	{"safe methods on own lines", "routes:\n  - name: a\n    match:\n      path: /a\n      methods:\n        - HEAD\n        - OPTIONS\n    key: [\"{header.K}\"]\n",
		[]string{
			`r.yaml:6: routes[0].match.methods[0]: HEAD is a safe method and is never guarded; remove it`,
			`r.yaml:7: routes[0].match.methods[1]: OPTIONS is a safe method and is never guarded; remove it`,
		}},
	{"method not a token", "routes:\n  - name: a\n    match: { path: /a, methods: [\"PO ST\"] }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:3: routes[0].match.methods[0]: "PO ST" is not an HTTP method`}},
	{"methods empty", "routes:\n  - name: a\n    match: { path: /a, methods: [] }\n    key: [\"{header.K}\"]\n",
		[]string{`r.yaml:3: routes[0].match.methods: must not be empty (leave it out to guard POST, PUT, PATCH and DELETE)`}},

	// Templates.
	{"key missing", "routes:\n  - name: a\n    match: { path: /a }\n",
		[]string{`r.yaml:2: routes[0].key: at least one key template is required, e.g. ["{header.Idempotency-Key}"]`}},
	{"key empty", "routes:\n  - name: a\n    match: { path: /a }\n    key: []\n",
		[]string{`r.yaml:4: routes[0].key: at least one key template is required, e.g. ["{header.Idempotency-Key}"]`}},
	{"key template", "routes:\n  - name: a\n    match: { path: /a }\n    key:\n      - \"{header.K}\"\n      - \"{cookie.session}\"\n",
		[]string{`r.yaml:6: routes[0].key[1]: invalid template "{cookie.session}": placeholder at offset 0: unknown source "cookie" (want header, query, form or body)`}},
	{"scope template", "defaults:\n  scope: [\"{header.Authorization\"]\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.scope[0]: invalid template "{header.Authorization": unbalanced '{' at offset 0`}},
	{"fingerprint empty path", "routes:\n" + route + "    fingerprint:\n      body: [amount, \"\"]\n      ignore: [\" \"]\n",
		[]string{
			`r.yaml:6: routes[0].fingerprint.body[1]: must not be an empty path`,
			`r.yaml:7: routes[0].fingerprint.ignore[0]: must not be an empty path`,
		}},

	{"fingerprint ignore query", "routes:\n" + route + "    fingerprint: { ignore: [meta.ts, \"items.#(id==1)\"] }\n",
		[]string{`r.yaml:5: routes[0].fingerprint.ignore[1]: "items.#(id==1)" cannot be deleted from a body: ignore paths are plain paths (no queries, wildcards, modifiers or multipaths)`}},

	// Durations and sizes.
	{"duration without unit", "routes:\n" + route + "    ttl: 30\n",
		[]string{`r.yaml:5: routes[0].ttl: 30 has no unit: write a Go duration such as 30s, 15m or 24h`}},
	{"duration zero", "defaults:\n  ttl: 0s\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.ttl: must be positive, got 0s (leave the field out to inherit the default)`}},
	{"duration bare zero", "defaults:\n  hold_ttl: 0\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.hold_ttl: must be positive, got 0 (leave the field out to inherit the default)`}},
	{"duration negative", "routes:\n" + route + "    hold_ttl: -1h\n",
		[]string{`r.yaml:5: routes[0].hold_ttl: must be positive, got -1h0m0s`}},
	{"duration text", "routes:\n" + route + "    ttl: a day\n",
		[]string{`r.yaml:5: routes[0].ttl: "a day" is not a duration like 30s, 15m or 24h`}},
	{"duration in unknown unit", "routes:\n" + route + "    hold_ttl: 30w\n",
		[]string{`r.yaml:5: routes[0].hold_ttl: "30w" is not a duration like 30s, 15m or 24h`}},
	{"lock lease too short", "routes:\n" + route + "    lock_lease: 500ms\n",
		[]string{`r.yaml:5: routes[0].lock_lease: must be at least 1s, got 500ms`}},
	{"ttl under 1s", "routes:\n" + route + "    ttl: 500ms\n",
		[]string{`r.yaml:5: routes[0].ttl: must be at least 1s, got 500ms`}},
	{"hold_ttl shorter than lock_lease", "routes:\n" + route + "    lock_lease: 1m\n    hold_ttl: 30s\n",
		[]string{`r.yaml:6: routes[0].hold_ttl: 30s is shorter than lock_lease (1m0s): a held record must outlive the claim it was made from`}},
	{"hold_ttl in defaults shorter than a route's lock_lease", "defaults:\n  hold_ttl: 10s\n  lock_lease: 5s\nroutes:\n" + route + "    lock_lease: 20s\n",
		[]string{`r.yaml:8: routes[0].lock_lease: 20s is longer than hold_ttl (10s, from defaults.hold_ttl): a held record must outlive the claim it was made from`}},
	{"lock_lease in defaults longer than the built-in hold_ttl", "defaults:\n  lock_lease: 800h\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.lock_lease: 800h0m0s is longer than hold_ttl (720h0m0s, the default): a held record must outlive the claim it was made from`}},
	{"duration as list", "routes:\n" + route + "    ttl: [1h]\n",
		[]string{`r.yaml:5: routes[0].ttl: must be a duration such as 30s or 24h, not a list`}},
	{"size zero", "defaults:\n  max_body: 0\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.max_body: must be positive, got 0 (leave the field out to inherit the default)`}},
	{"size zero text", "defaults:\n  max_body: 0MiB\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.max_body: must be positive, got 0 (leave the field out to inherit the default)`}},
	{"size negative", "routes:\n" + route + "    max_response: -1\n",
		[]string{`r.yaml:5: routes[0].max_response: must be positive, got -1`}},
	{"max_body above 64MiB", "routes:\n" + route + "    max_body: 65MiB\n",
		[]string{`r.yaml:5: routes[0].max_body: must be at most 64 MiB, got 65 MiB`}},
	{"max_body above 64MiB in defaults", "defaults:\n  max_body: 67108865\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.max_body: must be at most 64 MiB, got 67108865 bytes`}},
	{"size fraction", "routes:\n" + route + "    max_body: 1.5\n",
		[]string{`r.yaml:5: routes[0].max_body: 1.5 is not a whole number of bytes`}},
	{"size text", "routes:\n" + route + "    max_body: lots\n",
		[]string{`r.yaml:5: routes[0].max_body: "lots" is not a size like 1MiB, 512KB or 1048576`}},
	{"size overflow", "routes:\n" + route + "    max_body: 16EiB\n",
		[]string{`r.yaml:5: routes[0].max_body: "16EiB" is not a size like 1MiB, 512KB or 1048576`}},
	{"max_body above 64MiB", "routes:\n" + route + "    max_body: 65MiB\n",
		[]string{`r.yaml:5: routes[0].max_body: must be at most 64 MiB, got 65 MiB`}},
	{"size as bool", "routes:\n" + route + "    max_body: true\n",
		[]string{`r.yaml:5: routes[0].max_body: must be a size such as 1MiB or 1048576, not true`}},

	// Statuses, enums, headers.
	{"retry statuses", "defaults:\n  retry_statuses:\n    - 429\n    - 204\n    - 99\n    - 600\nroutes:\n" + route,
		[]string{
			`r.yaml:4: defaults.retry_statuses[1]: 204 is a success status; only failures can be retried`,
			`r.yaml:5: defaults.retry_statuses[2]: 99 is not an HTTP status (100 to 599)`,
			`r.yaml:6: defaults.retry_statuses[3]: 600 is not an HTTP status (100 to 599)`,
		}},
	{"retry statuses 1xx", "routes:\n" + route + "    retry_statuses: [100, 103, 429]\n",
		[]string{
			`r.yaml:5: routes[0].retry_statuses[0]: 100 is an informational status, never the answer to a call; it can never match`,
			`r.yaml:5: routes[0].retry_statuses[1]: 103 is an informational status, never the answer to a call; it can never match`,
		}},
	{"forward_key_header Authorization", "defaults:\n  forward_key_header: Authorization\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.forward_key_header: "Authorization" is a header the upstream needs from the request itself; choose another name, e.g. Idempotency-Key`}},
	{"forward_key_header hop-by-hop", "routes:\n" + route + "    forward_key_header: proxy-connection\n",
		[]string{`r.yaml:5: routes[0].forward_key_header: "proxy-connection" is a hop-by-hop header, dropped on the way upstream; choose another name, e.g. Idempotency-Key`}},
	{"mode enum", "routes:\n" + route + "    mode: dry_run\n",
		[]string{`r.yaml:5: routes[0].mode: "dry_run" is not one of enforce, observe`}},
	{"on_in_flight enum", "defaults:\n  on_in_flight: block\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.on_in_flight: "block" is not one of reject, wait`}},
	{"in_flight_wait too short", "routes:\n" + route + "    on_in_flight: wait\n    in_flight_wait: 1ms\n",
		[]string{`r.yaml:6: routes[0].in_flight_wait: must be at least 10ms, got 1ms`}},
	{"in_flight_wait too long", "routes:\n" + route + "    on_in_flight: wait\n    in_flight_wait: 1h\n",
		[]string{`r.yaml:6: routes[0].in_flight_wait: must be at most 5m0s, got 1h0m0s: a client held that long has given up`}},
	{"in_flight_wait with reject", "routes:\n" + route + "    on_in_flight: reject\n    in_flight_wait: 2s\n",
		[]string{`r.yaml:6: routes[0].in_flight_wait: is set, but on_in_flight is reject here: set on_in_flight: wait, or leave in_flight_wait out`}},
	{"on_redirect enum", "defaults:\n  on_redirect: follow\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.on_redirect: "follow" is not one of release, store`}},
	{"enum in defaults", "defaults:\n  on_store_error: fail_softly\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.on_store_error: "fail_softly" is not one of fail_closed, fail_open`}},
	{"enum explicitly empty", "routes:\n" + route + "    on_unknown_outcome: \"\"\n",
		[]string{`r.yaml:5: routes[0].on_unknown_outcome: "" is not one of hold, release, store`}},
	{"enum case", "routes:\n" + route + "    on_unknown_outcome: Hold\n",
		[]string{`r.yaml:5: routes[0].on_unknown_outcome: "Hold" is not one of hold, release, store`}},
	{"header name", "defaults:\n  forward_key_header: \"Idempotency Key\"\nroutes:\n" + route,
		[]string{`r.yaml:2: defaults.forward_key_header: "Idempotency Key" is not a valid header name`}},

	// Several problems at once, in line order; a field that failed to
	// decode is not reported again by validation.
	{"several", "defaults:\n  on_unknown_outcome: maybe\nroutes:\n  - name: 7\n    match: { path: /a }\n    key: [\"{header.K}\"]\n    ttl: soon\n  - name: b\n",
		[]string{
			`r.yaml:2: defaults.on_unknown_outcome: "maybe" is not one of hold, release, store`,
			`r.yaml:4: routes[0].name: must be a string, not 7 (quote it to make it a string)`,
			`r.yaml:7: routes[0].ttl: "soon" is not a duration like 30s, 15m or 24h`,
			`r.yaml:8: routes[1].match.path: is required`,
			`r.yaml:8: routes[1].key: at least one key template is required, e.g. ["{header.Idempotency-Key}"]`,
		}},
}

func TestParseErrors(t *testing.T) {
	for _, tt := range parseErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse("r.yaml", []byte(tt.yaml), Limits{})
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", r)
			}
			if r != nil {
				t.Errorf("Parse returned rules with an error")
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(tt.want, "\n     "))
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) != len(tt.want) {
				t.Fatalf("not an ErrorList of %d: %#v", len(tt.want), err)
			}
			for _, e := range list {
				if e.File != "r.yaml" {
					t.Errorf("File = %q", e.File)
				}
			}
		})
	}
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, r *Rules, res []Resolved)
	}{
		{"minimal", "routes:\n" + route, func(t *testing.T, r *Rules, res []Resolved) {
			if res[0].Name != "create_crm_deal" || res[0].Path != "/crm/deals" {
				t.Errorf("resolved = %+v", res[0])
			}
		}},
		{"sizes", "defaults:\n  max_body: 1MiB\n  max_response: 512KB\nroutes:\n" + route +
			"  - name: b\n    match: { path: /b }\n    key: [\"{header.K}\"]\n    max_body: 2048\n    max_response: \"1048576\"\n" +
			"  - name: c\n    match: { path: /c }\n    key: [\"{header.K}\"]\n    max_body: 1.5 KiB\n    max_response: 3e3\n",
			func(t *testing.T, r *Rules, res []Resolved) {
				want := [][2]int64{{1 << 20, 512000}, {2048, 1 << 20}, {1536, 3000}}
				for i, w := range want {
					if res[i].MaxBody != w[0] || res[i].MaxResponse != w[1] {
						t.Errorf("route %d: max_body %d max_response %d, want %v", i, res[i].MaxBody, res[i].MaxResponse, w)
					}
				}
			}},
		{"durations", "defaults:\n  ttl: 90m\n  lock_lease: 1s\nroutes:\n" + route + "    hold_ttl: 1h30m15s\n",
			func(t *testing.T, r *Rules, res []Resolved) {
				if res[0].TTL.String() != "1h30m0s" || res[0].LockLease.String() != "1s" || res[0].HoldTTL.String() != "1h30m15s" {
					t.Errorf("durations = %v %v %v", res[0].TTL, res[0].LockLease, res[0].HoldTTL)
				}
			}},
		{"null fields inherit", "defaults:\n  ttl: 2h\nroutes:\n" + route + "    ttl: ~\n    scope:\n    require_key: null\n",
			func(t *testing.T, r *Rules, res []Resolved) {
				if res[0].TTL.String() != "2h0m0s" || !res[0].RequireKey || len(res[0].Scope) != 1 {
					t.Errorf("resolved = %+v", res[0])
				}
			}},
		{"merge keys share settings", `
routes:
  - &deal
    name: create_crm_deal
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    ttl: 72h
  - <<: *deal
    name: update_crm_deal
    match: { methods: [PATCH], path: "/crm/deals/*" }
`, func(t *testing.T, r *Rules, res []Resolved) {
			if len(res) != 2 || res[1].Name != "update_crm_deal" || res[1].TTL.String() != "72h0m0s" ||
				res[1].Key[0].String() != "{header.Idempotency-Key}" || res[1].Methods[0] != "PATCH" {
				t.Errorf("resolved = %+v", res)
			}
		}},
		{"methods upper-cased", "routes:\n  - name: a\n    match: { path: /a, methods: [post, Put] }\n    key: [\"{header.K}\"]\n",
			func(t *testing.T, r *Rules, res []Resolved) {
				if strings.Join(res[0].Methods, ",") != "POST,PUT" {
					t.Errorf("methods = %v", res[0].Methods)
				}
			}},
		{"path patterns", "routes:\n" +
			"  - name: a\n    match: { path: \"/a/*\" }\n    key: [\"{header.K}\"]\n" +
			"  - name: b\n    match: { path: \"/b/*/c\" }\n    key: [\"{header.K}\"]\n" +
			"  - name: c\n    match: { path: \"/c/%2F[x\" }\n    key: [\"{header.K}\"]\n" +
			"  - name: d\n    match: { path: \"/d/[a-z]*\" }\n    key: [\"{header.K}\"]\n",
			func(t *testing.T, r *Rules, res []Resolved) {
				if len(res) != 4 {
					t.Errorf("resolved %d routes", len(res))
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse("r.yaml", []byte(tt.yaml), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.Resolve(Limits{})
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r, res)
		})
	}
}

// TestDocExample keeps the package example's routes.yaml valid.
func TestDocExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(src), "const rules = `")
	block, _, _ = strings.Cut(block, "`")
	lines := strings.Split(block, "\n")
	if len(lines) < 40 {
		t.Fatalf("found only %d lines of example in example_test.go", len(lines))
	}
	r, err := Parse("example_test.go example", []byte(strings.Join(lines, "\n")), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("example has %d routes, want 4", len(res))
	}
	// The defaults written out in the example are the built-in ones.
	var builtin Rules
	builtin.Routes = r.Routes
	want, err := builtin.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !equalResolved(res, want) {
		t.Errorf("the example's defaults differ from the built-in defaults:\n got %+v\nwant %+v", res, want)
	}
}

func TestParseLimitsErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("routes:\n")
	for i := 0; i < 60; i++ {
		b.WriteString("  - name: r" + strings.Repeat("x", i%3) + "\n") // lines 2, 3, 4, ...
	}
	// Each route lacks match.path and key, and names repeat after the third:
	// 6 problems on lines 2-4, then 3 per line, so the 101st is on line 36.
	_, err := Parse("r.yaml", []byte(b.String()), Limits{})
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("err = %v", err)
	}
	if len(list) != maxErrors+1 {
		t.Fatalf("%d errors, want %d", len(list), maxErrors+1)
	}
	last := list[maxErrors].Error()
	if want := "r.yaml:36: and 77 more problems"; last != want {
		t.Errorf("last error = %q, want %q", last, want)
	}
}

// TestForwardKeyHeaderReserved: forward_key_header may not name a header
// the request needs for itself or a hop-by-hop header, in any case.
func TestForwardKeyHeaderReserved(t *testing.T) {
	own := []string{"Authorization", "host", "Content-Length", "CONTENT-TYPE", "Cookie", "Transfer-Encoding"}
	hop := []string{"Connection", "keep-alive", "Proxy-Authorization", "Proxy-Authenticate", "Proxy-Connection", "TE", "Trailer", "Upgrade"}
	for _, tc := range []struct {
		names []string
		msg   string
	}{
		{own, "is a header the upstream needs from the request itself"},
		{hop, "is a hop-by-hop header, dropped on the way upstream"},
	} {
		for _, name := range tc.names {
			doc := "routes:\n" + route + "    forward_key_header: " + name + "\n"
			want := `r.yaml:5: routes[0].forward_key_header: "` + name + `" ` + tc.msg + "; choose another name, e.g. Idempotency-Key"
			if _, err := Parse("r.yaml", []byte(doc), Limits{}); err == nil || err.Error() != want {
				t.Errorf("%s:\n got %v\nwant %s", name, err, want)
			}
		}
	}
	for _, ok := range []string{"Idempotency-Key", "X-Request-Key", "Proxy", "X-Proxy-Key", "Tenant"} {
		doc := "routes:\n" + route + "    forward_key_header: " + ok + "\n"
		if _, err := Parse("r.yaml", []byte(doc), Limits{}); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
