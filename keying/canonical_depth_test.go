package keying

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// nestArrays is n arrays inside each other around a number.
func nestArrays(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }

// nestObjects is n objects inside each other: {"a":{"a":...1}}.
func nestObjects(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }

// nestMixed alternates objects and arrays, n levels in all.
func nestMixed(n int) string {
	var open, close strings.Builder
	for i := range n {
		if i%2 == 0 {
			open.WriteString(`{"k":`)
			close.WriteString("}")
		} else {
			open.WriteString(`[0,`)
			close.WriteString("]")
		}
	}
	c := []byte(close.String())
	for i, j := 0, len(c)-1; i < j; i, j = i+1, j-1 {
		c[i], c[j] = c[j], c[i]
	}
	return open.String() + "1" + string(c)
}

// depthCases are bodies at and around the nesting limit. Brackets inside
// strings, escaped quotes and escaped backslashes must not change the count.
var depthCases = []struct {
	name string
	body string
	deep bool
}{
	{"arrays at the limit", nestArrays(MaxDepth), false},
	{"arrays one over", nestArrays(MaxDepth + 1), true},
	{"objects at the limit", nestObjects(MaxDepth), false},
	{"objects one over", nestObjects(MaxDepth + 1), true},
	{"mixed at the limit", nestMixed(MaxDepth), false},
	{"mixed one over", nestMixed(MaxDepth + 1), true},
	{"brackets in a string", `{"a":"` + strings.Repeat("[{", 1000) + `"}`, false},
	{"brackets in a key", `{"` + strings.Repeat("[", 1000) + `":1}`, false},
	{"escaped quote keeps the string open", `["\"` + strings.Repeat("[", 1000) + `"]`, false},
	{"escaped backslash closes the string", `["\\",` + nestArrays(MaxDepth-1) + `]`, false},
	{"escaped backslash then too deep", `["\\",` + nestArrays(MaxDepth) + `]`, true},
	{"unicode escape of a quote", `["\u0022` + strings.Repeat("[", 1000) + `"]`, false},
	{"siblings do not add up", "[" + strings.Repeat(nestArrays(MaxDepth-1)+",", 100) + "1]", false},
	{"unclosed", strings.Repeat("[", 1<<20), true},
	{"unclosed objects", strings.Repeat(`{"a":`, 200), true},
	{"white space between brackets", strings.Repeat("[ \n\t", MaxDepth+1), true},
}

// TestBodyDepthLimit: a body nesting deeper than MaxDepth is refused with
// ErrTooDeep wherever keying reads it (key templates over the body, the
// fingerprint of the whole body, Canonicalize), also when the fingerprint
// would otherwise fall back to the raw bytes of a body that is not JSON; a
// body at the limit is read normally.
func TestBodyDepthLimit(t *testing.T) {
	body := MustParseTemplate("{body.x}")
	for _, tc := range depthCases {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				switch {
				case tc.deep && !errors.Is(err, ErrTooDeep):
					t.Errorf("%s: err = %v, want ErrTooDeep", what, err)
				case tc.deep && !errors.Is(err, ErrMalformedJSON):
					t.Errorf("%s: %v does not wrap ErrMalformedJSON", what, err)
				case !tc.deep && err != nil:
					t.Errorf("%s: %v, want no error", what, err)
				}
			}
			in := NewInput("POST", http.Header{}, "", []byte(tc.body))
			_, err := Fingerprint("POST", "op", in, FingerprintRule{})
			check("Fingerprint", err)

			in = NewInput("POST", http.Header{}, "", []byte(tc.body))
			_, _, err = DeriveKey([]Template{body}, in)
			check("DeriveKey {body.x}", err)

			if _, err := Canonicalize(nil, []byte(tc.body)); tc.deep || err != nil {
				check("Canonicalize", err)
			}
		})
	}
}

// TestCheckDepth is the scan itself, including bodies that are not JSON:
// it stops at the first byte no JSON text can have outside a string.
func TestCheckDepth(t *testing.T) {
	for _, tc := range depthCases {
		if err := checkDepth([]byte(tc.body)); (err != nil) != tc.deep || (err != nil && !errors.Is(err, ErrTooDeep)) {
			t.Errorf("%s: checkDepth = %v, want too deep: %v", tc.name, err, tc.deep)
		}
	}
	for _, tc := range []struct {
		name string
		body string
		deep bool
	}{
		{"empty", "", false},
		{"scalar", `"[[["`, false},
		{"more closing than opening", "]]]]" + strings.Repeat("[", MaxDepth+1), false},
		{"binary after a few brackets", "[[[\x00" + strings.Repeat("[", 1000), false},
		{"text after a few brackets", "[[[ hello " + strings.Repeat("[", 1000), false},
		{"unterminated string", `["` + strings.Repeat("[", 1000), false},
		{"backslash at the end", `["\`, false},
		{"literals and numbers are JSON bytes", strings.Repeat("[true,false,null,-1.5e+3,", MaxDepth+1), true},
		{"a second value", "[] " + strings.Repeat("[", MaxDepth+1), true},
	} {
		if err := checkDepth([]byte(tc.body)); (err != nil) != tc.deep {
			t.Errorf("%s: checkDepth = %v, want too deep: %v", tc.name, err, tc.deep)
		}
	}
}

// TestDeepBodyConstantStack: the largest body a route accepts (max_body is
// at most 64 MiB), all '[', is refused without a recursive parser ever
// seeing it: such a body overflows Go's 1 GB goroutine stack in gjson.Valid,
// which is a fatal error no recover can catch.
func TestDeepBodyConstantStack(t *testing.T) {
	body := bytes.Repeat([]byte("["), 64<<20)
	in := NewInput("POST", http.Header{}, "", body)
	if _, err := Fingerprint("POST", "op", in, FingerprintRule{}); !errors.Is(err, ErrTooDeep) {
		t.Errorf("Fingerprint: %v, want ErrTooDeep", err)
	}
}

// refDepth is the deepest nesting encoding/json's streaming decoder reaches
// in b before its first error (it reads a stream of values, so it gets at
// least as far as any parser of one value).
func refDepth(b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}

// FuzzBodyDepth feeds the body path deep and wide bodies: unit repeated n
// times (n up to 1023), then tail. The depth check must agree with
// encoding/json on valid JSON, never let through a body some parser reads
// deeper than MaxDepth, and every keying function must refuse exactly what
// the check refuses, without panicking.
func FuzzBodyDepth(f *testing.F) {
	for _, tc := range depthCases {
		if len(tc.body) < 4096 {
			f.Add([]byte(tc.body), uint16(0), []byte(nil))
		}
	}
	for _, seed := range []struct {
		unit string
		n    uint16
		tail string
	}{
		{"[", MaxDepth, strings.Repeat("]", MaxDepth)},
		{"[", MaxDepth + 1, strings.Repeat("]", MaxDepth+1)},
		{`{"a":`, MaxDepth + 1, "1" + strings.Repeat("}", MaxDepth+1)},
		{`[{"k":"\"[","v":[`, 70, strings.Repeat("]}", 70) + "]"},
		{`1,`, 1000, "2]"},
		{`{"a":1},`, 800, "{}]"},
		{`"\\\"[",`, 500, "0]"},
		{"[ \n", 300, ""},
		{"[\x00", 200, ""},
	} {
		f.Add([]byte(seed.unit), seed.n, []byte(seed.tail))
	}
	key := []Template{MustParseTemplate("{body.a}")}
	f.Fuzz(func(t *testing.T, unit []byte, n uint16, tail []byte) {
		if len(unit) > 64 || len(tail) > 1<<12 {
			return
		}
		body := append(bytes.Repeat(unit, int(n%1024)), tail...)
		err := checkDepth(body)
		if err != nil && err != ErrTooDeep {
			t.Fatalf("checkDepth = %v", err)
		}
		ref := refDepth(body)
		if json.Valid(body) && (err != nil) != (ref > MaxDepth) {
			t.Fatalf("valid JSON nesting %d levels: checkDepth = %v", ref, err)
		}
		if err == nil && ref > MaxDepth {
			t.Fatalf("checkDepth let through a body encoding/json reads %d levels deep", ref)
		}

		in := NewInput("POST", http.Header{}, "", body)
		_, ferr := Fingerprint("POST", "op", in, FingerprintRule{})
		if errors.Is(ferr, ErrTooDeep) != (err != nil) || (ferr != nil && err == nil) {
			t.Fatalf("Fingerprint = %v, checkDepth = %v", ferr, err)
		}
		_, _, kerr := DeriveKey(key, NewInput("POST", http.Header{}, "", body))
		if errors.Is(kerr, ErrTooDeep) != (err != nil) {
			t.Fatalf("DeriveKey = %v, checkDepth = %v", kerr, err)
		}
		canon, cerr := Canonicalize(nil, body)
		if errors.Is(cerr, ErrTooDeep) != (err != nil) {
			t.Fatalf("Canonicalize = %v, checkDepth = %v", cerr, err)
		}
		if cerr == nil && !json.Valid(canon) {
			t.Fatalf("canonical form %q is not JSON", canon)
		}
	})
}
