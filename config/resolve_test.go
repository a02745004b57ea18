package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// builtin is what a route with only name, match and key resolves to.
func builtin() Resolved {
	return Resolved{
		Name:             "a",
		Operation:        "a",
		Methods:          []string{"POST", "PUT", "PATCH", "DELETE"},
		Path:             "/a",
		Key:              []keying.Template{keying.MustParseTemplate("{header.K}")},
		Scope:            []keying.Template{keying.MustParseTemplate("{header.Authorization}")},
		TTL:              24 * time.Hour,
		LockLease:        30 * time.Second,
		HoldTTL:          720 * time.Hour,
		RequireKey:       true,
		MaxBody:          1 << 20,
		MaxResponse:      1 << 20,
		ForwardKeyHeader: "Idempotency-Key",
		RetryStatuses:    []int{401, 403, 404, 405, 408, 413, 415, 425, 429, 431, 503},
		OnUnknownOutcome: "hold",
		OnRedirect:       "release",
		OnStoreError:     "fail_closed",
		MaxExecutions:    5,
		Mode:             "enforce",
		OnInFlight:       "reject",
		Fingerprint:      keying.FingerprintRule{},
		TombstoneTTL:     720 * time.Hour,
		AfterExpiry:      "execute",
		OnSamePayload:    "warn",
	}
}

func templates(src ...string) []keying.Template {
	out := make([]keying.Template, len(src))
	for i, s := range src {
		out[i] = keying.MustParseTemplate(s)
	}
	return out
}

func TestResolveInheritance(t *testing.T) {
	tests := []struct {
		name     string
		defaults string // YAML lines under defaults:, indented by two
		route    string // YAML lines of the route, indented by four
		want     func(r *Resolved)
	}{
		{"built-in defaults", "", "", func(r *Resolved) {}},
		{"defaults apply to the route", `
  ttl: 1h
  lock_lease: 10s
  hold_ttl: 48h
  require_key: false
  max_body: 64KiB
  max_response: 2MiB
  scope: ["{header.X-Tenant}"]
  forward_key_header: X-Request-Key
  retry_statuses: [502, 503]
  on_unknown_outcome: release
  on_store_error: fail_open`, "", func(r *Resolved) {
			r.TTL, r.LockLease, r.HoldTTL = time.Hour, 10*time.Second, 48*time.Hour
			r.RequireKey = false
			r.MaxBody, r.MaxResponse = 64<<10, 2<<20
			r.Scope = templates("{header.X-Tenant}")
			r.ForwardKeyHeader = "X-Request-Key"
			r.RetryStatuses = []int{502, 503}
			r.OnUnknownOutcome, r.OnStoreError = "release", "fail_open"
		}},
		{"the route wins over defaults", `
  ttl: 1h
  require_key: false
  max_body: 64KiB
  scope: ["{header.X-Tenant}"]
  forward_key_header: X-Request-Key
  retry_statuses: [502]
  on_unknown_outcome: release
  on_store_error: fail_open`, `
    ttl: 2h
    require_key: true
    max_body: 1KiB
    scope: ["{header.X-Account}", "{query.region}"]
    forward_key_header: X-Other-Key
    retry_statuses: [429]
    on_unknown_outcome: store
    on_store_error: fail_closed`, func(r *Resolved) {
			r.TTL = 2 * time.Hour
			r.MaxBody = 1024
			r.Scope = templates("{header.X-Account}", "{query.region}")
			r.ForwardKeyHeader = "X-Other-Key"
			r.RetryStatuses = []int{429}
			r.OnUnknownOutcome = "store"
		}},
		{"on_redirect in defaults applies", "\n  on_redirect: store", "", func(r *Resolved) { r.OnRedirect = "store" }},
		{"on_redirect in the route wins", "\n  on_redirect: store", "\n    on_redirect: release", func(r *Resolved) {}},
		{"mode in defaults applies", "\n  mode: observe", "", func(r *Resolved) { r.Mode = "observe" }},
		{"mode in the route wins", "\n  mode: observe", "\n    mode: enforce", func(r *Resolved) {}},
		{"on_in_flight: wait waits 5s by default", "", "\n    on_in_flight: wait",
			func(r *Resolved) { r.OnInFlight, r.InFlightWait = "wait", 5*time.Second }},
		{"in_flight_wait in defaults applies to a waiting route", "\n  in_flight_wait: 2s\n  on_in_flight: wait", "",
			func(r *Resolved) { r.OnInFlight, r.InFlightWait = "wait", 2*time.Second }},
		{"in_flight_wait in the route wins", "\n  in_flight_wait: 2s\n  on_in_flight: wait", "\n    in_flight_wait: 300ms",
			func(r *Resolved) { r.OnInFlight, r.InFlightWait = "wait", 300*time.Millisecond }},
		{"a rejecting route does not wait", "\n  in_flight_wait: 2s\n  on_in_flight: wait", "\n    on_in_flight: reject",
			func(r *Resolved) {}},
		{"confirm in defaults applies", "\n  confirm: true", "", func(r *Resolved) { r.Confirm = true }},
		{"confirm: false in the route wins", "\n  confirm: true", "\n    confirm: false", func(r *Resolved) {}},
		{"show_unparsed_bodies in defaults applies", "\n  show_unparsed_bodies: true", "", func(r *Resolved) { r.ShowUnparsedBodies = true }},
		{"show_unparsed_bodies in the route", "", "\n    show_unparsed_bodies: true", func(r *Resolved) { r.ShowUnparsedBodies = true }},
		{"show_unparsed_bodies: false in the route wins", "\n  show_unparsed_bodies: true", "\n    show_unparsed_bodies: false", func(r *Resolved) {}},
		{"scope: [] in defaults means no scope", "\n  scope: []", "", func(r *Resolved) { r.Scope = nil }},
		{"scope: [] in the route means no scope", "\n  scope: [\"{header.X-Tenant}\"]", "\n    scope: []",
			func(r *Resolved) { r.Scope = nil }},
		{"a route scope replaces scope: [] in defaults", "\n  scope: []", "\n    scope: [\"{header.X-Tenant}\"]",
			func(r *Resolved) { r.Scope = templates("{header.X-Tenant}") }},
		{"scope absent in the route inherits", "\n  scope: [\"{header.X-Tenant}\"]", "\n    ttl: 1h",
			func(r *Resolved) { r.Scope = templates("{header.X-Tenant}"); r.TTL = time.Hour }},
		{"forward_key_header empty in defaults", "\n  forward_key_header: \"\"", "",
			func(r *Resolved) { r.ForwardKeyHeader = "" }},
		{"forward_key_header empty in the route", "\n  forward_key_header: X-Key", "\n    forward_key_header: ''",
			func(r *Resolved) { r.ForwardKeyHeader = "" }},
		{"forward_key_header set over an empty default", "\n  forward_key_header: ''", "\n    forward_key_header: X-Key",
			func(r *Resolved) { r.ForwardKeyHeader = "X-Key" }},
		{"forward_key_header null inherits", "\n  forward_key_header: X-Key", "\n    forward_key_header: ~",
			func(r *Resolved) { r.ForwardKeyHeader = "X-Key" }},
		{"retry_statuses: [] means none", "\n  retry_statuses: []", "",
			func(r *Resolved) { r.RetryStatuses = nil }},
		{"require_key false in the route", "", "\n    require_key: false",
			func(r *Resolved) { r.RequireKey = false }},
		{"operation", "", "\n    operation: crm.deal:create",
			func(r *Resolved) { r.Operation = "crm.deal:create" }},
		{"fingerprint and external id", "", "\n    fingerprint: { body: [amount, customer.id], ignore: [meta] }\n    external_id: data.id",
			func(r *Resolved) {
				r.Fingerprint = keying.FingerprintRule{Body: []string{"amount", "customer.id"}, Ignore: []string{"meta"}}
				r.ExternalID = "data.id"
			}},
		{"empty fingerprint lists", "", "\n    fingerprint: { body: [], ignore: [] }", func(r *Resolved) {}},
		{"redact_fields of defaults and route add up, lower case, once", "\n  redact_fields: [Card_Number, iban]", "\n    redact_fields: [IBAN, cvv]",
			func(r *Resolved) { r.RedactFields = []string{"card_number", "iban", "cvv"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "defaults:" + tt.defaults + "\nroutes:\n  - name: a\n    match: { path: /a }\n    key: [\"{header.K}\"]" + tt.route + "\n"
			r, err := Parse("r.yaml", []byte(doc), Limits{})
			if err != nil {
				t.Fatalf("%v\n%s", err, doc)
			}
			res, err := r.Resolve(Limits{})
			if err != nil {
				t.Fatal(err)
			}
			want := builtin()
			tt.want(&want)
			if len(res) != 1 || !reflect.DeepEqual(res[0], want) {
				t.Errorf("Resolve:\n got %+v\nwant %+v", res, want)
			}
		})
	}
}

// TestValuesKeepTheirCase: viper lowercases keys; values such as header
// names must come through as written.
func TestValuesKeepTheirCase(t *testing.T) {
	doc := `
defaults:
  scope: ["{header.X-Tenant-ID}"]
  forward_key_header: X-Idempotency-KEY
routes:
  - name: CreateDeal
    operation: CRM.CreateDeal
    match: { methods: [POST], path: /CRM/Deals }
    key: ["{header.Idempotency-Key}", "{body.Event.ID}:{query.OrderId}", "{form.TxnRef}"]
    fingerprint: { body: [Amount, Customer.ID], ignore: [Meta.DeliveryAttempt] }
    external_id: Data.ID
`
	r, err := Parse("r.yaml", []byte(doc), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got := res[0]
	var keys []string
	for _, k := range got.Key {
		keys = append(keys, k.String())
	}
	checks := []struct{ field, got, want string }{
		{"name", got.Name, "CreateDeal"},
		{"operation", got.Operation, "CRM.CreateDeal"},
		{"path", got.Path, "/CRM/Deals"},
		{"key", strings.Join(keys, " "), "{header.Idempotency-Key} {body.Event.ID}:{query.OrderId} {form.TxnRef}"},
		{"scope", got.Scope[0].String(), "{header.X-Tenant-ID}"},
		{"forward_key_header", got.ForwardKeyHeader, "X-Idempotency-KEY"},
		{"fingerprint", strings.Join(append(got.Fingerprint.Body, got.Fingerprint.Ignore...), " "), "Amount Customer.ID Meta.DeliveryAttempt"},
		{"external_id", got.ExternalID, "Data.ID"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.field, c.got, c.want)
		}
	}
}

// richRules is a document using every field, explicit empty lists and
// pointers set to their zero values.
const richRules = `
defaults:
  ttl: 36h
  lock_lease: 45s
  hold_ttl: 240h
  require_key: false
  max_body: 256KiB
  max_response: 3MB
  scope: []
  forward_key_header: ""
  retry_statuses: []
  on_unknown_outcome: release
  on_store_error: fail_open
routes:
  - name: create_crm_deal
    match: { methods: [POST], path: /crm/deals }
    key: ["{header.Idempotency-Key}", "{body.event.id}:{body.event.type}"]
    fingerprint:
      body: [amount, currency, customer_id]
      ignore: [meta.delivery_attempt]
    external_id: id
    ttl: 72h
  - name: retry_crm_deal
    operation: create_crm_deal
    match: { path: "/internal/crm/deals/*/retry" }
    key: ["{header.Idempotency-Key}"]
    scope: ["{header.Authorization}", "{query.tenant}"]
    forward_key_header: Idempotency-Key
    retry_statuses: [429, 503]
    require_key: true
    lock_lease: 1m
    max_body: 1024
    on_unknown_outcome: hold
    on_store_error: fail_closed
  - name: minimal
    match: { path: /m }
    key: ["{query.k}"]
`

func TestJSONRoundTrip(t *testing.T) {
	for _, doc := range []string{richRules, "routes:\n" + route} {
		r, err := Parse("r.yaml", []byte(doc), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		want, err := r.Resolve(Limits{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Rules
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields() // as Caddy decodes module configs
		if err := dec.Decode(&back); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		back.warnings, back.parsed = r.warnings, r.parsed // not in the JSON: Warnings computes them again
		if !reflect.DeepEqual(&back, r) {
			t.Errorf("rules differ after a JSON round trip:\n got %+v\nwant %+v\njson %s", back, *r, b)
		}
		got, err := back.Resolve(Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Resolve differs after a JSON round trip:\n got %+v\nwant %+v\njson %s", got, want, b)
		}
	}
}

func TestJSONShape(t *testing.T) {
	r, err := Parse("r.yaml", []byte(richRules), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{
		`"defaults":{"ttl":"36h0m0s","lock_lease":"45s","hold_ttl":"240h0m0s","require_key":false,"max_body":262144,"max_response":3000000,"scope":[],"forward_key_header":"","retry_statuses":[],"on_unknown_outcome":"release","on_store_error":"fail_open"}`,
		// Policy fields are inline in a route, after the route's own.
		`{"name":"create_crm_deal","match":{"methods":["POST"],"path":"/crm/deals"},"key":["{header.Idempotency-Key}","{body.event.id}:{body.event.type}"],"fingerprint":{"body":["amount","currency","customer_id"],"ignore":["meta.delivery_attempt"]},"external_id":"id","ttl":"72h0m0s"}`,
		`{"name":"minimal","match":{"path":"/m"},"key":["{query.k}"]}`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("JSON lacks %s\nJSON: %s", want, js)
		}
	}
}

func TestJSONDecode(t *testing.T) {
	js := `{"defaults":{"ttl":3600000000000,"lock_lease":"2m","max_body":"1MiB","max_response":2048},
		"routes":[{"name":"a","match":{"path":"/a"},"key":["{header.K}"],"hold_ttl":"1h","scope":[]}]}`
	var r Rules
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatal(err)
	}
	res, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := builtin()
	want.TTL, want.LockLease, want.HoldTTL = time.Hour, 2*time.Minute, time.Hour
	want.MaxBody, want.MaxResponse = 1<<20, 2048
	want.Scope = nil
	if !reflect.DeepEqual(res[0], want) {
		t.Errorf("Resolve:\n got %+v\nwant %+v", res[0], want)
	}

	for _, bad := range []string{
		`{"defaults":{"ttl":"1 day"}}`,
		`{"defaults":{"ttl":1.5}}`,
		`{"defaults":{"max_body":"lots"}}`,
		`{"defaults":{"max_body":-1.5}}`,
		`{"defaults":{"max_body":"16EiB"}}`,
	} {
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("json.Unmarshal(%s) succeeded", bad)
		}
	}
}

// TestValidate checks rules built in Go (as from Caddy's JSON): errors name
// fields, with no file or line.
func TestValidate(t *testing.T) {
	valid := func() Rules {
		return Rules{Routes: []Route{{Name: "a", Match: Match{Path: "/a"}, Key: []string{"{header.K}"}}}}
	}
	tests := []struct {
		name   string
		modify func(r *Rules)
		want   string
	}{
		{"valid", func(r *Rules) {}, ""},
		{"no routes", func(r *Rules) { r.Routes = nil }, "routes: at least one route is required"},
		{"enum", func(r *Rules) { r.Routes[0].OnUnknownOutcome = "maybe" },
			`routes[0].on_unknown_outcome: "maybe" is not one of hold, release, store`},
		{"negative duration", func(r *Rules) { r.Defaults.TTL = Duration(-time.Second) },
			"defaults.ttl: must be positive, got -1s"},
		{"zero means inherit", func(r *Rules) { r.Defaults.TTL = 0; r.Defaults.MaxBody = 0 }, ""},
		{"lock lease", func(r *Rules) { r.Routes[0].LockLease = Duration(time.Millisecond) },
			"routes[0].lock_lease: must be at least 1s, got 1ms"},
		{"negative size", func(r *Rules) { r.Defaults.MaxResponse = -5 },
			"defaults.max_response: must be positive, got -5"},
		{"explicit empty methods", func(r *Rules) { r.Routes[0].Match.Methods = []string{} },
			"routes[0].match.methods: must not be empty (leave it out to guard POST, PUT, PATCH and DELETE)"},
		{"trace", func(r *Rules) { r.Routes[0].Match.Methods = []string{"trace"} },
			"routes[0].match.methods[0]: TRACE is a safe method and is never guarded; remove it"},
		{"two problems", func(r *Rules) {
			r.Routes = append(r.Routes, r.Routes[0])
			r.Routes[1].Key = []string{"{header.}"}
		}, `routes[1].name: "a" is already the name of routes[0]` + "\n" +
			`routes[1].key[0]: invalid template "{header.}": placeholder at offset 0: empty name after "header."`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := valid()
			tt.modify(&r)
			err := r.Validate(Limits{})
			_, rerr := r.Resolve(Limits{})
			if tt.want == "" {
				if err != nil || rerr != nil {
					t.Fatalf("Validate = %v, Resolve = %v", err, rerr)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate:\n got %v\nwant %s", err, tt.want)
			}
			if rerr == nil || rerr.Error() != tt.want {
				t.Fatalf("Resolve:\n got %v\nwant %s", rerr, tt.want)
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("not an ErrorList: %T", err)
			}
			for _, e := range list {
				if e.File != "" || e.Line != 0 || e.Field == "" {
					t.Errorf("error %#v: want a field and no file or line", e)
				}
			}
		})
	}

	var nilRules *Rules
	if err := nilRules.Validate(Limits{}); err == nil || err.Error() != "routes: at least one route is required" {
		t.Errorf("nil Rules: Validate = %v", err)
	}
}

// TestResolvedIsACopy: changing a Resolved must not change the rules, the
// built-in defaults or other routes.
func TestResolvedIsACopy(t *testing.T) {
	r, err := Parse("r.yaml", []byte(richRules), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		for j := range first[i].Methods {
			first[i].Methods[j] = "X"
		}
		for j := range first[i].RetryStatuses {
			first[i].RetryStatuses[j] = 0
		}
		for j := range first[i].Fingerprint.Body {
			first[i].Fingerprint.Body[j] = "x"
		}
	}
	second, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if second[0].Methods[0] != "POST" || second[1].RetryStatuses[0] != 429 || second[0].Fingerprint.Body[0] != "amount" ||
		second[2].Methods[0] != "POST" {
		t.Errorf("Resolve results share memory with the rules or defaults: %+v", second)
	}
	var plain Rules
	plain.Routes = []Route{{Name: "a", Match: Match{Path: "/a"}, Key: []string{"{header.K}"}}}
	res, _ := plain.Resolve(Limits{})
	res[0].RetryStatuses[0] = 1
	res, _ = plain.Resolve(Limits{})
	if res[0].RetryStatuses[0] != 401 {
		t.Errorf("built-in retry statuses were changed through a Resolved")
	}
}

// TestValidateFloorsInJSON: in Caddy's JSON a bare integer duration is
// nanoseconds, as everywhere in Caddy, so "ttl": 86400 is 86.4µs: an error
// under the same floors as in YAML, with a hint.
func TestValidateFloorsInJSON(t *testing.T) {
	const rt = `"name":"a","match":{"path":"/a"},"key":["{header.K}"]`
	for _, tc := range []struct{ json, want string }{
		{`{"defaults":{"ttl":86400},"routes":[{` + rt + `}]}`,
			`defaults.ttl: must be at least 1s, got 86.4µs (a bare number in Caddy's JSON is nanoseconds: write "86400s" for seconds)`},
		{`{"routes":[{` + rt + `,"lock_lease":30}]}`,
			`routes[0].lock_lease: must be at least 1s, got 30ns (a bare number in Caddy's JSON is nanoseconds: write "30s" for seconds)`},
		{`{"routes":[{` + rt + `,"ttl":"500ms"}]}`,
			`routes[0].ttl: must be at least 1s, got 500ms`},
		{`{"routes":[{` + rt + `,"lock_lease":"1h","hold_ttl":"30m"}]}`,
			`routes[0].hold_ttl: 30m0s is shorter than lock_lease (1h0m0s): a held record must outlive the claim it was made from`},
		{`{"routes":[{` + rt + `,"max_body":67108865}]}`,
			`routes[0].max_body: must be at most 64 MiB, got 67108865 bytes`},
		{`{"routes":[{` + rt + `,"max_body":"64MiB","ttl":86400000000000}]}`, ``},
	} {
		var r Rules
		if err := json.Unmarshal([]byte(tc.json), &r); err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		err := r.Validate(Limits{})
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.json, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s:\n got %v\nwant %s", tc.json, err, tc.want)
		}
	}
}

// TestLockLeaseLongerThanOpTimeout: a claim whose lease can run out while
// a store call on it is still within op_timeout is no claim; the store's
// op_timeout comes from outside the rules (Limits).
func TestLockLeaseLongerThanOpTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		op   time.Duration
		want string
	}{
		{"route lease equal", "routes:\n" + route + "    lock_lease: 2s\n", 2 * time.Second,
			`r.yaml:5: routes[0].lock_lease: 2s is not longer than the store's op_timeout (2s)`},
		{"defaults lease shorter", "defaults:\n  lock_lease: 1s\nroutes:\n" + route, 2 * time.Second,
			`r.yaml:2: defaults.lock_lease: 1s is not longer than the store's op_timeout (2s)`},
		{"built-in lease", "routes:\n" + route, time.Minute,
			`r.yaml:1: defaults.lock_lease: 30s (the default) is not longer than the store's op_timeout (1m0s)`},
		{"longer lease", "routes:\n" + route + "    lock_lease: 3s\n", 2 * time.Second, ``},
		{"no op_timeout given", "routes:\n" + route + "    lock_lease: 1s\n", 0, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("r.yaml", []byte(tc.yaml), Limits{OpTimeout: tc.op})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Parse:\n got %v\nwant %s", err, tc.want)
			}
			// The same rules from JSON: the field, no file or line.
			r, perr := Parse("r.yaml", []byte(tc.yaml), Limits{})
			if perr != nil {
				t.Fatal(perr)
			}
			_, err = r.Resolve(Limits{OpTimeout: tc.op})
			want := tc.want[strings.Index(tc.want, ": ")+2:]
			if err == nil || err.Error() != want {
				t.Fatalf("Resolve:\n got %v\nwant %s", err, want)
			}
		})
	}
}

// TestFingerprintQuery: the sorted query string counts in the fingerprint
// unless fingerprint.query is false.
func TestFingerprintQuery(t *testing.T) {
	for _, tc := range []struct {
		yaml, json string
		want       bool
	}{
		{"", `{}`, true},
		{"\n    fingerprint: { query: true }", `{"query":true}`, true},
		{"\n    fingerprint: { query: false, body: [amount] }", `{"body":["amount"],"query":false}`, false},
	} {
		doc := "routes:\n" + route + strings.TrimPrefix(tc.yaml, "\n") + "\n"
		if tc.yaml == "" {
			doc = "routes:\n" + route
		}
		r, err := Parse("r.yaml", []byte(doc), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		res, err := r.Resolve(Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Fingerprint.IgnoreQuery == tc.want {
			t.Errorf("%q: Fingerprint.IgnoreQuery = %v, want %v", tc.yaml, res[0].Fingerprint.IgnoreQuery, !tc.want)
		}
		var fromJSON Rules
		js := `{"routes":[{"name":"a","match":{"path":"/a"},"key":["{header.K}"],"fingerprint":` + tc.json + `}]}`
		if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
			t.Fatal(err)
		}
		if res, err = fromJSON.Resolve(Limits{}); err != nil || res[0].Fingerprint.IgnoreQuery == tc.want {
			t.Errorf("%s: Query = %v (%v), want %v", js, res, err, tc.want)
		}
	}
	if _, err := Parse("r.yaml", []byte("routes:\n"+route+"    fingerprint: { query: no }\n"), Limits{}); err == nil ||
		err.Error() != `r.yaml:5: routes[0].fingerprint.query: must be true or false, not the string "no"` {
		t.Errorf("query: no: %v", err)
	}
}
