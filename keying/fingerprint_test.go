package keying

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fpOf computes the expected fingerprint from its definition, for a
// request with no target and no query.
func fpOf(method, operation, body string) string {
	return fpOfTarget(method, operation, "", "", body)
}

// fpOfTarget computes the expected fingerprint with a target and a
// canonical query.
func fpOfTarget(method, operation, target, query, body string) string {
	len32 := func(s string) string {
		n := len(s)
		return string([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}) + s
	}
	sum := sha256.Sum256([]byte("idemgate-fp-v2\x00" + method + "\x00" + operation + "\x00" + len32(target) + len32(query) + body))
	return hex.EncodeToString(sum[:])
}

// TestFingerprintTarget: the target and the sorted query count, the query
// only unless the rule ignores it.
func TestFingerprintTarget(t *testing.T) {
	tests := []struct {
		name, target, rawQuery string
		rule                   FingerprintRule
		wantTarget, wantQuery  string
	}{
		{"none", "", "", FingerprintRule{}, "", ""},
		{"target", "2/", "", FingerprintRule{}, "2/", ""},
		{"sorted query", "", "b=2&a=1&a=0", FingerprintRule{}, "", "a=0&a=1&b=2"},
		{"decoded query", "", "b=%32&a=x+y", FingerprintRule{}, "", "a=x+y&b=2"},
		{"empty pairs dropped", "", "&a=1&&", FingerprintRule{}, "", "a=1"},
		{"bad escape kept", "", "a=%zz", FingerprintRule{}, "", "a=%25zz"},
		{"query ignored", "7/", "a=1", FingerprintRule{IgnoreQuery: true}, "7/", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := NewInput("POST", nil, tt.rawQuery, []byte(`{"a":1}`))
			in.SetTarget(tt.target)
			got, err := Fingerprint("POST", "op", in, tt.rule)
			if err != nil {
				t.Fatal(err)
			}
			if want := fpOfTarget("POST", "op", tt.wantTarget, tt.wantQuery, `{"a":1}`); got != want {
				t.Errorf("Fingerprint = %s, want %s", got, want)
			}
		})
	}
	a, _ := Fingerprint("POST", "op", NewInput("POST", nil, "amount=5", nil), FingerprintRule{})
	b, _ := Fingerprint("POST", "op", NewInput("POST", nil, "amount=500", nil), FingerprintRule{})
	if a == b {
		t.Error("?amount=5 and ?amount=500 give one fingerprint")
	}
}

func TestFingerprint(t *testing.T) {
	sel := FingerprintRule{Body: []string{"currency", "amount", "customer_id"}}
	ign := FingerprintRule{Ignore: []string{"meta.delivery_attempt"}}
	both := FingerprintRule{Body: []string{"amount", "meta"}, Ignore: []string{"meta.delivery_attempt"}}
	tests := []struct {
		name      string
		body      string
		rule      FingerprintRule
		canonical string // the body part of the hashed text
		wantErr   bool
	}{
		{name: "empty", body: "", canonical: ""},
		{name: "blank", body: " \n", canonical: ""},
		{name: "empty with rule", body: "", rule: sel, canonical: ""},
		{name: "whole body canonical", body: `{ "b" : 1, "a" : [2, {"d":4,"c":3}] }`, canonical: `{"a":[2,{"c":3,"d":4}],"b":1}`},
		{name: "duplicate keys", body: `{"a":1,"a":2}`, canonical: `{"a":2}`},
		{name: "not json, zero rule: raw", body: "amount=10&currency=EUR", canonical: "amount=10&currency=EUR"},
		{name: "too deep, zero rule: refused", body: strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), wantErr: true},
		{name: "not json with selection", body: "amount=10", rule: sel, wantErr: true},
		{name: "not json with ignore", body: "{", rule: ign, wantErr: true},
		{name: "selection", body: `{"customer_id":"c1","amount":10,"currency":"EUR","note":"x"}`, rule: sel,
			canonical: `{"amount":10,"currency":"EUR","customer_id":"c1"}`},
		{name: "selection missing is null", body: `{"amount":10,"customer_id":null}`, rule: sel,
			canonical: `{"amount":10,"currency":null,"customer_id":null}`},
		{name: "selection of objects is canonical", body: `{"meta":{"z":1,"a":{"y":2,"x":1}},"amount":1}`,
			rule:      FingerprintRule{Body: []string{"meta"}},
			canonical: `{"meta":{"a":{"x":1,"y":2},"z":1}}`},
		{name: "selection path with modifier", body: `{"items":[{"sku":"b","q":1},{"sku":"a","q":2}]}`,
			rule:      FingerprintRule{Body: []string{"items.#.sku"}},
			canonical: `{"items.#.sku":["b","a"]}`},
		{name: "selection of a pretty modifier", body: `{"a":{"c":1,"b":2}}`,
			rule:      FingerprintRule{Body: []string{"a|@pretty"}},
			canonical: `{"a|@pretty":{"b":2,"c":1}}`},
		{name: "selection duplicated paths", body: `{"a":1}`, rule: FingerprintRule{Body: []string{"a", "a"}}, canonical: `{"a":1}`},
		{name: "selection path needing escape", body: `{"a\"b":1}`, rule: FingerprintRule{Body: []string{`a"b`}}, canonical: `{"a\"b":1}`},
		{name: "ignore", body: `{"amount":1,"meta":{"delivery_attempt":3,"source":"x"}}`, rule: ign,
			canonical: `{"amount":1,"meta":{"source":"x"}}`},
		{name: "ignore missing path", body: `{"amount":1}`, rule: ign, canonical: `{"amount":1}`},
		{name: "ignore duplicate key removes the winner", body: `{"meta":{"delivery_attempt":1,"delivery_attempt":2},"a":1}`, rule: ign,
			canonical: `{"a":1,"meta":{}}`},
		{name: "ignore array indexes refer to the original", body: `{"items":["x","y","z"]}`,
			rule:      FingerprintRule{Ignore: []string{"items.0", "items.1"}},
			canonical: `{"items":["z"]}`},
		{name: "ignore array indexes in any order", body: `{"items":["x","y","z"]}`,
			rule:      FingerprintRule{Ignore: []string{"items.1", "items.0"}},
			canonical: `{"items":["z"]}`},
		{name: "ignore nested and parent", body: `{"a":{"b":1},"c":2}`,
			rule:      FingerprintRule{Ignore: []string{"a.b", "a"}},
			canonical: `{"c":2}`},
		{name: "ignore escaped dot", body: `{"a.b":1,"a":{"b":2}}`,
			rule:      FingerprintRule{Ignore: []string{`a\.b`}},
			canonical: `{"a":{"b":2}}`},
		{name: "ignore everything", body: `{"a":1}`, rule: FingerprintRule{Ignore: []string{"a"}}, canonical: `{}`},
		{name: "ignore then select", body: `{"amount":5,"meta":{"delivery_attempt":2,"id":"m"}}`, rule: both,
			canonical: `{"amount":5,"meta":{"id":"m"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := NewInput("POST", nil, "", []byte(tt.body))
			got, err := Fingerprint("POST", "create_crm_deal", in, tt.rule)
			if tt.wantErr {
				if !errors.Is(err, ErrMalformedJSON) {
					t.Fatalf("Fingerprint = %q, %v; want ErrMalformedJSON", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fingerprint: %v", err)
			}
			if want := fpOf("POST", "create_crm_deal", tt.canonical); got != want {
				t.Fatalf("Fingerprint = %s, want %s (body %q)", got, want, tt.canonical)
			}
		})
	}
}

func TestFingerprintEquivalence(t *testing.T) {
	fp := func(method, op, body string, rule FingerprintRule) string {
		t.Helper()
		s, err := Fingerprint(method, op, NewInput(method, nil, "", []byte(body)), rule)
		if err != nil {
			t.Fatalf("Fingerprint(%q): %v", body, err)
		}
		return s
	}
	var zero FingerprintRule
	a := fp("POST", "op", `{"amount":10,"currency":"EUR"}`, zero)
	if b := fp("POST", "op", "{\n \"currency\": \"\\u0045UR\",\n \"amount\": 10\n}", zero); a != b {
		t.Error("key order, white space and escapes change the fingerprint")
	}
	for name, other := range map[string]string{
		"other value":     fp("POST", "op", `{"amount":11,"currency":"EUR"}`, zero),
		"number spelling": fp("POST", "op", `{"amount":10.0,"currency":"EUR"}`, zero),
		"other method":    fp("PUT", "op", `{"amount":10,"currency":"EUR"}`, zero),
		"other operation": fp("POST", "op2", `{"amount":10,"currency":"EUR"}`, zero),
		"empty body":      fp("POST", "op", ``, zero),
	} {
		if other == a {
			t.Errorf("%s gives the same fingerprint", name)
		}
	}
	// Ignored and unselected fields do not count.
	rule := FingerprintRule{Body: []string{"amount"}, Ignore: []string{"x"}}
	if fp("POST", "op", `{"amount":1,"note":"a"}`, rule) != fp("POST", "op", `{"note":"b","amount":1}`, rule) {
		t.Error("an unselected field changes the fingerprint")
	}
	ign := FingerprintRule{Ignore: []string{"attempt"}}
	if fp("POST", "op", `{"amount":1,"attempt":1}`, ign) != fp("POST", "op", `{"amount":1,"attempt":2}`, ign) {
		t.Error("an ignored field changes the fingerprint")
	}
	// Field separators are unambiguous: method/operation boundaries.
	if fp("POST", "xop", `{}`, zero) == fp("POSTx", "op", `{}`, zero) {
		t.Error("method and operation run together")
	}
	// The order of rule paths never matters.
	r1 := FingerprintRule{Body: []string{"a", "b"}, Ignore: []string{"c.0", "c.2"}}
	r2 := FingerprintRule{Body: []string{"b", "a"}, Ignore: []string{"c.2", "c.0"}}
	body := `{"a":1,"b":2,"c":[0,1,2,3]}`
	if fp("POST", "op", body, r1) != fp("POST", "op", body, r2) {
		t.Error("the order of rule paths changes the fingerprint")
	}
	if r1.Encode() != r2.Encode() {
		t.Errorf("Encode differs for reordered rules: %s vs %s", r1.Encode(), r2.Encode())
	}
}

// TestFingerprintSharesParse checks that the key and the fingerprint of one
// Input come from one parse of the body.
func TestFingerprintSharesParse(t *testing.T) {
	body := []byte(`{"id":"a","amount":1}`)
	in := NewInput("POST", nil, "", body)
	if k, _, _ := DeriveKey([]Template{MustParseTemplate("{body.id}")}, in); k != "a" {
		t.Fatalf("key = %q", k)
	}
	copy(body, `{"id":"b","amount":2}`) // ignored: already parsed
	got, err := Fingerprint("POST", "op", in, FingerprintRule{})
	if err != nil {
		t.Fatal(err)
	}
	if want := fpOf("POST", "op", `{"amount":1,"id":"a"}`); got != want {
		t.Fatalf("Fingerprint = %s, want %s", got, want)
	}
}

func TestFingerprintRuleEncode(t *testing.T) {
	tests := []struct {
		rule FingerprintRule
		want string
	}{
		{FingerprintRule{}, ""},
		{FingerprintRule{Body: []string{}, Ignore: []string{}}, ""},
		{FingerprintRule{Body: []string{"currency", "amount", "amount"}}, `{"body":["amount","currency"]}`},
		{FingerprintRule{Ignore: []string{"meta.delivery_attempt"}}, `{"ignore":["meta.delivery_attempt"]}`},
		{FingerprintRule{Body: []string{"a<b", `q"`}, Ignore: []string{"x"}}, `{"body":["a<b","q\""],"ignore":["x"]}`},
	}
	for _, tt := range tests {
		got := tt.rule.Encode()
		if got != tt.want {
			t.Errorf("Encode(%+v) = %s, want %s", tt.rule, got, tt.want)
			continue
		}
		back, err := ParseFingerprintRule(got)
		if err != nil {
			t.Errorf("ParseFingerprintRule(%s): %v", got, err)
			continue
		}
		if back.Encode() != got {
			t.Errorf("round trip %s -> %+v -> %s", got, back, back.Encode())
		}
		want := tt.rule.normalized()
		if !reflect.DeepEqual(back, want) {
			t.Errorf("ParseFingerprintRule(%s) = %#v, want %#v", got, back, want)
		}
	}
	// Encode must not reorder the caller's slices.
	r := FingerprintRule{Body: []string{"b", "a"}}
	r.Encode()
	if r.Body[0] != "b" {
		t.Error("Encode modified the rule")
	}
}

func TestParseFingerprintRuleErrors(t *testing.T) {
	for _, s := range []string{
		`x`, `{"body":"a"}`, `{"bodies":["a"]}`, `{"body":["a"]} {}`, `{"body":[""]}`, `{"ignore":[""]}`,
		`{"ignore":["items.#(q>1)"]}`, `{"ignore":["a|b"]}`, `{"ignore":["@this"]}`, `[]`,
	} {
		if r, err := ParseFingerprintRule(s); err == nil {
			t.Errorf("ParseFingerprintRule(%s) = %+v, want an error", s, r)
		}
	}
}

func TestFingerprintRuleValidate(t *testing.T) {
	good := FingerprintRule{Body: []string{"a.b", "items.#.sku", "a|@pretty"}, Ignore: []string{"meta.x", "items.0", `a\.b`}}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for _, tt := range []struct {
		rule FingerprintRule
		want string
	}{
		{FingerprintRule{Body: []string{"a", ""}}, "fingerprint body[1]: empty path"},
		{FingerprintRule{Ignore: []string{""}}, "fingerprint ignore[0]: empty path"},
		{FingerprintRule{Ignore: []string{"a", "b.*"}}, `fingerprint ignore[1]: path "b.*" cannot be deleted`},
	} {
		if err := tt.rule.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.rule, err, tt.want)
		}
	}
}
