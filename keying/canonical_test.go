package keying

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{`{}`, `{}`},
		{`[]`, `[]`},
		{` { } `, `{}`},
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"{\n  \"b\" : [ 1 , 2 ] ,\t\"a\" : { \"d\" : null , \"c\" : true }\n}", `{"a":{"c":true,"d":null},"b":[1,2]}`},
		{`[3,1,2]`, `[3,1,2]`},
		{`[{"b":1,"a":2},{"d":[{"z":0,"y":0}]}]`, `[{"a":2,"b":1},{"d":[{"y":0,"z":0}]}]`},
		// numbers as written
		{`{"n":1.0,"m":1e0,"o":-0,"p":1E+2,"q":0.10}`, `{"m":1e0,"n":1.0,"o":-0,"p":1E+2,"q":0.10}`},
		{`12345678901234567890123`, `12345678901234567890123`},
		// scalars at the top level
		{` "x" `, `"x"`},
		{`true`, `true`},
		{`null`, `null`},
		// strings
		{`"\u0041"`, `"A"`},
		{`"\/"`, `"/"`},
		{`"a\"b\\c"`, `"a\"b\\c"`},
		{`"\u0022\u005c"`, `"\"\\"`},
		{`"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
		{`"\u0008\u000c\u000A\u000d\u0009"`, `"\b\f\n\r\t"`},
		{`"\u0000\u001F\u007f"`, "\"\\u0000\\u001f\x7f\""},
		{`"\u00e9\u20AC"`, `"é€"`},
		{`"é€"`, `"é€"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"\u2028"`, "\"\u2028\""},
		{`"\ud800"`, "\"\ufffd\""},
		{"\"\xff\"", "\"\xff\""},
		{"\"\\n\xff\"", "\"\\n\xff\""},
		// keys: sorted by unescaped bytes, re-escaped canonically
		{`{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{`{"B":1,"a":2,"_":3,"":4}`, `{"":4,"B":1,"_":3,"a":2}`},
		{`{"é":1,"z":2}`, `{"z":2,"é":1}`},
		{`{"a\nb":1}`, `{"a\nb":1}`},
		{`{"a\u000Ab":1}`, `{"a\nb":1}`},
		// duplicate keys: the last wins, also when spelled differently
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`{"a":1,"b":0,"a":{"x":1},"a":3}`, `{"a":3,"b":0}`},
		{`{"A":1,"\u0041":2}`, `{"A":2}`},
		{`{"a":{"x":1,"x":2},"a":{"y":1,"y":2}}`, `{"a":{"y":2}}`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Canonicalize(nil, []byte(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("Canonicalize(%s) = %s, want %s", tt.in, got, tt.want)
			}
			again, err := Canonicalize(nil, got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("not idempotent: %s -> %s (%v)", got, again, err)
			}
		})
	}
}

func TestCanonicalizeAppends(t *testing.T) {
	dst := []byte("prefix:")
	got, err := Canonicalize(dst, []byte(`{"b":1,"a":2}`))
	if err != nil || string(got) != `prefix:{"a":2,"b":1}` {
		t.Fatalf("Canonicalize = %q, %v", got, err)
	}
	got, err = Canonicalize(dst, []byte(`{"b":1,`))
	if err == nil || string(got) != "prefix:" {
		t.Fatalf("Canonicalize(bad) = %q, %v; want dst unchanged and an error", got, err)
	}
}

func TestCanonicalizeErrors(t *testing.T) {
	deep := strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1)
	atMax := strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)
	for _, in := range []string{
		``, ` `, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `+1`, `-`,
		`"\x"`, `"\u12"`, "\"a\x01b\"", `'a'`, `{a:1}`, `{"a":1}{"b":2}`, `{"a":1} x`, `nul`, `True`,
		`[1 2]`, `NaN`, deep,
	} {
		t.Run(in, func(t *testing.T) {
			out, err := Canonicalize(nil, []byte(in))
			if err == nil {
				t.Fatalf("Canonicalize(%q) = %s, want an error", in, out)
			}
			if !errors.Is(err, ErrMalformedJSON) {
				t.Fatalf("error %v does not wrap ErrMalformedJSON", err)
			}
		})
	}
	if _, err := Canonicalize(nil, []byte(atMax)); err != nil {
		t.Fatalf("document at MaxDepth rejected: %v", err)
	}
}

// TestCanonicalizeAgreesWithEncodingJSON compares the canonical form with
// what encoding/json sees: the same data (duplicate keys: last wins).
func TestCanonicalizeAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"b":[1,{"y":"\u00e9","x":null}],"a":"\n\"x\"","c":{"k":true,"k":false}}`,
		`[{"a":1.5e3},"s",-0.0,[]]`,
	} {
		out, err := Canonicalize(nil, []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal([]byte(in), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &b); err != nil {
			t.Fatalf("canonical output %s is not JSON: %v", out, err)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Fatalf("data changed:\n in %s\nout %s", ja, jb)
		}
	}
}

// shuffleKeys rewrites a JSON document with the members of every object in
// a random order and random white space, keeping duplicate keys in their
// original relative order (their order decides which one wins).
func shuffleKeys(t testing.TB, r *rand.Rand, raw string) string {
	v := gjson.Parse(raw)
	ws := func() string { return []string{"", " ", "\n", "\t ", "\r\n"}[r.IntN(5)] }
	var b strings.Builder
	switch {
	case v.IsObject():
		type kv struct{ k, v string }
		var members []kv
		v.ForEach(func(k, val gjson.Result) bool {
			members = append(members, kv{k.Raw, val.Raw})
			return true
		})
		// Shuffle, then restore the relative order of equal keys.
		perm := r.Perm(len(members))
		shuffled := make([]kv, len(members))
		for i, p := range perm {
			shuffled[i] = members[p]
		}
		byKey := map[string][]kv{}
		for _, m := range members {
			k := gjson.Parse(m.k).Str
			byKey[k] = append(byKey[k], m)
		}
		for i, m := range shuffled {
			k := gjson.Parse(m.k).Str
			shuffled[i] = byKey[k][0]
			byKey[k] = byKey[k][1:]
		}
		b.WriteString("{" + ws())
		for i, m := range shuffled {
			if i > 0 {
				b.WriteString("," + ws())
			}
			b.WriteString(m.k + ws() + ":" + ws() + shuffleKeys(t, r, m.v) + ws())
		}
		b.WriteString("}")
	case v.IsArray():
		b.WriteString("[" + ws())
		i := 0
		v.ForEach(func(_, val gjson.Result) bool {
			if i > 0 {
				b.WriteString("," + ws())
			}
			i++
			b.WriteString(shuffleKeys(t, r, val.Raw) + ws())
			return true
		})
		b.WriteString("]")
	default:
		b.WriteString(v.Raw)
	}
	return b.String()
}

func checkCanonical(t *testing.T, in []byte) {
	t.Helper()
	out, err := Canonicalize(nil, in)
	if err != nil {
		if !errors.Is(err, ErrMalformedJSON) {
			t.Fatalf("error %v does not wrap ErrMalformedJSON", err)
		}
		if gjson.ValidBytes(in) && !strings.Contains(err.Error(), "nested deeper") {
			t.Fatalf("valid input %q rejected: %v", in, err)
		}
		return
	}
	if !gjson.ValidBytes(out) {
		t.Fatalf("output %q of %q is not valid JSON", out, in)
	}
	if json.Valid(in) && !json.Valid(out) {
		t.Fatalf("output %q of %q is not valid for encoding/json", out, in)
	}
	again, err := Canonicalize(nil, out)
	if err != nil {
		t.Fatalf("canonical output %q rejected: %v", out, err)
	}
	if !bytes.Equal(again, out) {
		t.Fatalf("not idempotent:\n  in %q\n  c1 %q\n  c2 %q", in, out, again)
	}
	if len(out) > len(bytes.TrimSpace(in)) {
		t.Fatalf("canonical form %q is longer than input %q", out, in)
	}
	r := rand.New(rand.NewPCG(uint64(len(in)), 1))
	for range 3 {
		perm := shuffleKeys(t, r, string(in))
		got, err := Canonicalize(nil, []byte(perm))
		if err != nil {
			t.Fatalf("permutation %q rejected: %v", perm, err)
		}
		if !bytes.Equal(got, out) {
			t.Fatalf("permutation changes canonical form:\n  in   %q\n  perm %q\n  out  %q\n  got  %q", in, perm, out, got)
		}
	}
}

func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"b":1,"a":[1,2,{"d":null,"c":"x"}]}`, `"\u0041\/\ud83d\ude00\u0000"`,
		`{"a":1,"a":2,"\u0061":3}`, `1.50e+3`, ` [ true , false , null ] `, "\"\xff\"",
		`{"a\"b":{"":[]}}`, `{`, `[1,]`, `{"x":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkCanonical(t, in)
	})
}
