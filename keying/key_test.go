package keying

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestResolve(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	tests := []struct {
		name    string
		tmpl    string
		header  http.Header
		query   string
		body    string
		want    string
		wantOK  bool
		wantErr bool
		// wantInvalid: an ErrInvalidKey error (a header that cannot carry a key)
		wantInvalid bool
	}{
		// header
		{name: "header bare", tmpl: "{header.Idempotency-Key}", header: hdr("Idempotency-Key", "abc-123"), want: "abc-123", wantOK: true},
		{name: "header name any case", tmpl: "{header.idempotency-KEY}", header: hdr("Idempotency-Key", "k"), want: "k", wantOK: true},
		{name: "header trimmed", tmpl: "{header.X}", header: hdr("X", " \tk1 \t"), want: "k1", wantOK: true},
		{name: "header two field lines", tmpl: "{header.X}", header: hdr("X", "one", "X", "two"), wantInvalid: true},
		{name: "header missing", tmpl: "{header.X}", header: hdr("Y", "v"), want: "", wantOK: false},
		{name: "header empty", tmpl: "{header.X}", header: hdr("X", ""), want: "", wantOK: false},
		{name: "header nil map", tmpl: "{header.X}", want: "", wantOK: false},
		{name: "header non-canonical map key is not seen", tmpl: "{header.X-Key}", header: http.Header{"x-key": {"v"}}, wantOK: false},
		// Structured Field strings (RFC 8941)
		{name: "sf string", tmpl: "{header.Idempotency-Key}", header: hdr("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`), want: "8e03978e-40d5-43e8-bc93-6894a57f9324", wantOK: true},
		{name: "sf string with spaces around", tmpl: "{header.K}", header: hdr("K", ` "abc" `), want: "abc", wantOK: true},
		{name: "sf string escapes", tmpl: "{header.K}", header: hdr("K", `"a\"b\\c"`), want: `a"b\c`, wantOK: true},
		{name: "sf string with parameters", tmpl: "{header.K}", header: hdr("K", `"abc";v=1`), want: "abc", wantOK: true},
		{name: "sf string inner space", tmpl: "{header.K}", header: hdr("K", `"a b"`), want: "a b", wantOK: true},
		{name: "sf empty string", tmpl: "{header.K}", header: hdr("K", `""`), want: "", wantOK: false},
		{name: "unterminated quote", tmpl: "{header.K}", header: hdr("K", `"abc`), wantInvalid: true},
		{name: "bad sf escape", tmpl: "{header.K}", header: hdr("K", `"a\qb"`), wantInvalid: true},
		{name: "sf token is bare", tmpl: "{header.K}", header: hdr("K", `abc;x=1`), want: "abc;x=1", wantOK: true},
		{name: "lone quote", tmpl: "{header.K}", header: hdr("K", `"`), wantInvalid: true},
		{name: "header list", tmpl: "{header.K}-{query.a}", header: hdr("K", "a,b"), query: "a=1", wantInvalid: true},
		// query
		{name: "query", tmpl: "{query.id}", query: "id=42&x=1", want: "42", wantOK: true},
		{name: "query decoded", tmpl: "{query.id}", query: "id=a%2Fb+c", want: "a/b c", wantOK: true},
		{name: "query first value", tmpl: "{query.id}", query: "id=1&id=2", want: "1", wantOK: true},
		{name: "query case-sensitive", tmpl: "{query.ID}", query: "id=1", wantOK: false},
		{name: "query missing", tmpl: "{query.id}", query: "x=1", wantOK: false},
		{name: "query empty value", tmpl: "{query.id}", query: "id=", wantOK: false},
		{name: "query bad pair does not hide others", tmpl: "{query.id}", query: "bad=%zz&id=7", want: "7", wantOK: true},
		// form
		{name: "form", tmpl: "{form.order}", header: hdr("Content-Type", form), body: "order=o-1&x=2", want: "o-1", wantOK: true},
		{name: "form with charset", tmpl: "{form.order}", header: hdr("Content-Type", "Application/X-WWW-Form-Urlencoded; charset=utf-8"), body: "order=o%201", want: "o 1", wantOK: true},
		{name: "form needs form content type", tmpl: "{form.order}", header: hdr("Content-Type", "application/json"), body: "order=o-1", wantOK: false},
		{name: "form without content type", tmpl: "{form.order}", body: "order=o-1", wantOK: false},
		{name: "form missing field", tmpl: "{form.order}", header: hdr("Content-Type", form), body: "x=1", wantOK: false},
		{name: "form does not read query", tmpl: "{form.order}", header: hdr("Content-Type", form), query: "order=q", body: "", wantOK: false},
		// body
		{name: "body string", tmpl: "{body.event.id}", body: `{"event":{"id":"evt_184"}}`, want: "evt_184", wantOK: true},
		{name: "body string unescaped", tmpl: "{body.id}", body: `{"id":"a\u0041\"\\"}`, want: `aA"\`, wantOK: true},
		{name: "body number as written", tmpl: "{body.n}", body: `{"n": 1.50e+3}`, want: "1.50e+3", wantOK: true},
		{name: "body negative int", tmpl: "{body.n}", body: `{"n":-7}`, want: "-7", wantOK: true},
		{name: "body true", tmpl: "{body.b}", body: `{"b":true}`, want: "true", wantOK: true},
		{name: "body false", tmpl: "{body.b}", body: `{"b":false}`, want: "false", wantOK: true},
		{name: "body null", tmpl: "{body.b}", body: `{"b":null}`, wantOK: false},
		{name: "body object", tmpl: "{body.b}", body: `{"b":{"c":1}}`, wantOK: false},
		{name: "body array", tmpl: "{body.b}", body: `{"b":[1]}`, wantOK: false},
		{name: "body missing", tmpl: "{body.b}", body: `{"a":1}`, wantOK: false},
		{name: "body empty string", tmpl: "{body.b}", body: `{"b":""}`, wantOK: false},
		{name: "body array index", tmpl: "{body.items.1.sku}", body: `{"items":[{"sku":"a"},{"sku":"b"}]}`, want: "b", wantOK: true},
		{name: "body escaped dot", tmpl: `{body.a\.b}`, body: `{"a.b":"x","a":{"b":"y"}}`, want: "x", wantOK: true},
		{name: "body duplicate key last wins", tmpl: "{body.id}", body: `{"id":"first","id":"last"}`, want: "last", wantOK: true},
		{name: "body top-level array", tmpl: "{body.0}", body: `["x"]`, want: "x", wantOK: true},
		{name: "body empty", tmpl: "{body.id}", body: "", wantOK: false},
		{name: "body blank", tmpl: "{body.id}", body: " \r\n\t", wantOK: false},
		{name: "body malformed", tmpl: "{body.id}", body: `{"id":"x"`, wantErr: true},
		{name: "body trailing garbage", tmpl: "{body.id}", body: `{"id":"x"} x`, wantErr: true},
		{name: "body not json", tmpl: "{body.id}", body: `id=x`, wantErr: true},
		{name: "body too deep", tmpl: "{body.id}", body: strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), wantErr: true},
		{name: "body at max depth", tmpl: "{body.0}", body: strings.Repeat("[", MaxDepth-1) + `["x"]` + strings.Repeat("]", MaxDepth-1), wantOK: false},
		// combinations
		{name: "two body fields", tmpl: "{body.event.id}:{body.event.type}", body: `{"event":{"type":"deal.create","id":"evt_1"}}`, want: "evt_1:deal.create", wantOK: true},
		{name: "one of two missing", tmpl: "{body.event.id}:{body.event.type}", body: `{"event":{"id":"evt_1"}}`, want: "evt_1:", wantOK: false},
		{name: "mixed sources", tmpl: "{header.X}/{query.q}/{body.b}", header: hdr("X", "h"), query: "q=1", body: `{"b":2}`, want: "h/1/2", wantOK: true},
		{name: "literal only", tmpl: "fixed", want: "fixed", wantOK: true},
		{name: "literal around", tmpl: "pre-{query.a}-post", query: "a=x", want: "pre-x-post", wantOK: true},
		{name: "malformed body with header", tmpl: "{header.X}:{body.b}", header: hdr("X", "h"), body: "{", wantErr: true},
		{name: "many parts", tmpl: "{query.a}{query.a}{query.a}{query.a}{query.a}{query.a}{query.a}{query.a}{query.a}-", query: "a=1", want: "111111111-", wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := NewInput("POST", tt.header, tt.query, []byte(tt.body))
			v, ok, err := MustParseTemplate(tt.tmpl).Resolve(in)
			if tt.wantInvalid {
				if !errors.Is(err, ErrInvalidKey) || v != "" || ok {
					t.Fatalf("Resolve = %q, %v, %v; want an ErrInvalidKey error", v, ok, err)
				}
				return
			}
			if tt.wantErr {
				if err == nil || !errors.Is(err, ErrMalformedJSON) {
					t.Fatalf("Resolve = %q, %v, %v; want an ErrMalformedJSON error", v, ok, err)
				}
				if v != "" || ok {
					t.Fatalf("Resolve with error returned %q, %v", v, ok)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if v != tt.want || ok != tt.wantOK {
				t.Fatalf("Resolve = %q, %v; want %q, %v", v, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestInputParsesOnce checks that the cached state is reused: the body is
// changed after the first resolution (which the contract forbids) and the
// second resolution must still see the first parse.
func TestInputParsesOnce(t *testing.T) {
	body := []byte(`{"a":"1"}`)
	in := NewInput("POST", nil, "q=1", body)
	tmpl := MustParseTemplate("{body.a}")
	if v, _, _ := tmpl.Resolve(in); v != "1" {
		t.Fatalf("first resolve = %q", v)
	}
	copy(body, `{"a":"2"}`)
	if v, _, _ := tmpl.Resolve(in); v != "1" {
		t.Fatalf("second resolve = %q, want the cached 1", v)
	}
	if in.Method() != "POST" {
		t.Fatalf("Method() = %q", in.Method())
	}
}

func TestDeriveKey(t *testing.T) {
	templates := []Template{
		MustParseTemplate("{header.Idempotency-Key}"),
		MustParseTemplate("{body.event.id}:{body.event.type}"),
		MustParseTemplate("{query.key}"),
	}
	tests := []struct {
		name    string
		header  http.Header
		query   string
		body    string
		wantKey string
		wantIdx int
		wantErr bool
	}{
		{name: "header wins", header: hdr("Idempotency-Key", "h1"), query: "key=q", body: `{"event":{"id":"e","type":"t"}}`, wantKey: "h1", wantIdx: 0},
		{name: "header wins over malformed body", header: hdr("Idempotency-Key", "h1"), body: `{`, wantKey: "h1", wantIdx: 0},
		{name: "body second", body: `{"event":{"id":"e","type":"t"}}`, query: "key=q", wantKey: "e:t", wantIdx: 1},
		{name: "partial body falls through", body: `{"event":{"id":"e"}}`, query: "key=q", wantKey: "q", wantIdx: 2},
		{name: "empty body falls through", query: "key=q", wantKey: "q", wantIdx: 2},
		{name: "none", body: `{}`, wantKey: "", wantIdx: -1},
		{name: "malformed body stops", body: `{"event":`, query: "key=q", wantIdx: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := NewInput("POST", tt.header, tt.query, []byte(tt.body))
			key, idx, err := DeriveKey(templates, in)
			if tt.wantErr {
				if !errors.Is(err, ErrMalformedJSON) {
					t.Fatalf("DeriveKey error = %v, want ErrMalformedJSON", err)
				}
				if !strings.Contains(err.Error(), templates[tt.wantIdx].String()) {
					t.Errorf("error %q does not name the template", err)
				}
			} else if err != nil {
				t.Fatalf("DeriveKey: %v", err)
			}
			if key != tt.wantKey || idx != tt.wantIdx {
				t.Fatalf("DeriveKey = %q, %d; want %q, %d", key, idx, tt.wantKey, tt.wantIdx)
			}
		})
	}
	if key, idx, err := DeriveKey(nil, NewInput("POST", nil, "", nil)); key != "" || idx != -1 || err != nil {
		t.Fatalf("DeriveKey(nil) = %q, %d, %v", key, idx, err)
	}
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		wantErr string
	}{
		{name: "one byte", key: "a"},
		{name: "uuid", key: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "all visible ascii", key: func() string {
			var b []byte
			for c := byte(0x21); c <= 0x7e; c++ {
				b = append(b, c)
			}
			return string(b)
		}()},
		{name: "255 bytes", key: strings.Repeat("k", 255)},
		{name: "empty", key: "", wantErr: "invalid idempotency key: empty"},
		{name: "256 bytes", key: strings.Repeat("k", 256), wantErr: "too long: 256 > 255 bytes"},
		{name: "long with bad bytes reports length", key: strings.Repeat("\n", 300), wantErr: "too long: 300 > 255 bytes"},
		{name: "space", key: "a b", wantErr: "space at position 1"},
		{name: "leading space", key: " a", wantErr: "space at position 0"},
		{name: "tab", key: "a\t", wantErr: "control character 0x09 at position 1"},
		{name: "newline", key: "ab\ncd", wantErr: "control character 0x0a at position 2"},
		{name: "nul", key: "\x00", wantErr: "control character 0x00 at position 0"},
		{name: "del", key: "a\x7f", wantErr: "control character 0x7f at position 1"},
		{name: "utf-8", key: "keyé", wantErr: "non-ASCII byte 0xc3 at position 3"},
		{name: "invalid utf-8", key: "\xff", wantErr: "non-ASCII byte 0xff at position 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateKey(tt.key)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateKey: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidateKey error = %v, want %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not wrap ErrInvalidKey", err)
			}
		})
	}
}

func TestScopeHash(t *testing.T) {
	auth := []Template{MustParseTemplate("{header.Authorization}")}
	a := ScopeHash(auth, NewInput("POST", hdr("Authorization", "Bearer a"), "", nil))
	a2 := ScopeHash(auth, NewInput("POST", hdr("Authorization", "Bearer a"), "", []byte("{}")))
	b := ScopeHash(auth, NewInput("POST", hdr("Authorization", "Bearer b"), "", nil))
	none := ScopeHash(auth, NewInput("POST", nil, "", nil))
	empty := ScopeHash(nil, NewInput("POST", hdr("Authorization", "Bearer a"), "", nil))
	if a != a2 {
		t.Error("same Authorization gives different scopes")
	}
	if a == b || a == none || none == empty || a == empty {
		t.Error("different scopes collide")
	}
	// The empty scope list hashes the same whatever the request.
	if ScopeHash(nil, NewInput("GET", nil, "", nil)) != empty {
		t.Error("empty scope list is not fixed")
	}

	// Length prefixes keep ["ab","c"] and ["a","bc"] apart.
	two := []Template{MustParseTemplate("{query.x}"), MustParseTemplate("{query.y}")}
	s1 := ScopeHash(two, NewInput("POST", nil, "x=ab&y=c", nil))
	s2 := ScopeHash(two, NewInput("POST", nil, "x=a&y=bc", nil))
	if s1 == s2 {
		t.Error("length prefix missing: [ab c] == [a bc]")
	}

	// Malformed JSON does not fail the scope; the placeholder counts as "".
	body := []Template{MustParseTemplate("{body.tenant}")}
	bad := ScopeHash(body, NewInput("POST", nil, "", []byte("{")))
	missing := ScopeHash(body, NewInput("POST", nil, "", []byte("{}")))
	if bad != missing {
		t.Error("malformed body scope differs from missing field scope")
	}

	// The exact construction, so ids stay stable across releases.
	want := sha256.Sum256([]byte("idemgate-scope-v1\x00\x00\x00\x00\x01\x00\x00\x00\x08Bearer a"))
	if a != want {
		t.Errorf("ScopeHash = %x, want %x", a, want)
	}
}

// TestKeyHeaderFieldLines: a key header arrives as one field line holding
// a Structured Field string or a bare value without a comma; anything else
// is an invalid key (400 key-invalid), never the first of several keys.
// Scope templates keep reading the first line leniently.
func TestKeyHeaderFieldLines(t *testing.T) {
	tmpl := []Template{MustParseTemplate("{header.Idempotency-Key}"), MustParseTemplate("{query.k}")}
	tests := []struct {
		name    string
		values  []string // field lines, in order
		want    string
		wantIdx int
		invalid string // part of the error; "" = valid
	}{
		{name: "bare", values: []string{"evt_184"}, want: "evt_184"},
		{name: "sf string", values: []string{`"evt_184"`}, want: "evt_184"},
		{name: "sf string with comma inside", values: []string{`"a,b"`}, want: "a,b"},
		{name: "sf string escapes", values: []string{`"a\"b\\c"`}, want: `a"b\c`},
		{name: "sf string with parameters", values: []string{`"abc";v=1`}, want: "abc"},
		{name: "sf string padded", values: []string{"  \"abc\"\t"}, want: "abc"},
		{name: "bare with quote inside", values: []string{`ab"c`}, want: `ab"c`},
		{name: "bare semicolon", values: []string{"abc;x=1"}, want: "abc;x=1"},
		{name: "absent falls through", values: nil, want: "q", wantIdx: 1},
		{name: "empty falls through", values: []string{""}, want: "q", wantIdx: 1},
		{name: "two field lines", values: []string{"k1", "k2"}, invalid: "2 field lines"},
		{name: "two equal field lines", values: []string{"k1", "k1"}, invalid: "2 field lines"},
		{name: "two sf field lines", values: []string{`"k1"`, `"k2"`}, invalid: "2 field lines"},
		{name: "comma in bare key", values: []string{"key,with,commas"}, invalid: "comma"},
		{name: "folded list", values: []string{"k1, k2"}, invalid: "comma"},
		{name: "trailing comma", values: []string{"k1,"}, invalid: "comma"},
		{name: "unterminated sf string", values: []string{`"unterminated`}, invalid: "Structured Field"},
		{name: "lone quote", values: []string{`"`}, invalid: "Structured Field"},
		{name: "bad sf escape", values: []string{`"a\qb"`}, invalid: "Structured Field"},
		{name: "sf list of strings", values: []string{`"k1", "k2"`}, invalid: "Structured Field"},
		{name: "sf string then text", values: []string{`"k1" x`}, invalid: "Structured Field"},
		{name: "sf string non-ascii", values: []string{"\"caf\xc3\xa9\""}, invalid: "Structured Field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Idempotency-Key": tt.values}
			if tt.values == nil {
				h = http.Header{}
			}
			key, idx, err := DeriveKey(tmpl, NewInput("POST", h, "k=q", nil))
			if tt.invalid != "" {
				if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), tt.invalid) {
					t.Fatalf("DeriveKey = %q, %d, %v; want an ErrInvalidKey error about %q", key, idx, err, tt.invalid)
				}
				for _, v := range tt.values {
					if len(v) > 2 && strings.Contains(err.Error(), v) {
						t.Errorf("error %q shows the header's value", err)
					}
				}
				if key != "" {
					t.Errorf("DeriveKey returned key %q with its error", key)
				}
				return
			}
			if err != nil || key != tt.want || idx != tt.wantIdx {
				t.Fatalf("DeriveKey = %q, %d, %v; want %q, %d", key, idx, err, tt.want, tt.wantIdx)
			}
		})
	}
}

// TestScopeHeaderLenient: the scope reads a header's first field line,
// whatever it holds, so a scope header is never a reason to refuse.
func TestScopeHeaderLenient(t *testing.T) {
	scope := []Template{MustParseTemplate("{header.X-Api-Key}")}
	two := ScopeHash(scope, NewInput("POST", http.Header{"X-Api-Key": {"a", "b"}}, "", nil))
	first := ScopeHash(scope, NewInput("POST", http.Header{"X-Api-Key": {"a"}}, "", nil))
	if two != first {
		t.Error("a second X-Api-Key line changed the scope")
	}
}

func TestFormatKeyHeader(t *testing.T) {
	tests := []struct{ key, want string }{
		{"evt_184", `"evt_184"`},
		{"evt_184:deal.create", `"evt_184:deal.create"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"a,b", `"a,b"`},
	}
	for _, tt := range tests {
		got, err := FormatKeyHeader(tt.key)
		if err != nil || got != tt.want {
			t.Errorf("FormatKeyHeader(%q) = %q, %v; want %q", tt.key, got, err, tt.want)
		}
		// What is forwarded reads back as the same key.
		back, _, err := DeriveKey([]Template{MustParseTemplate("{header.K}")}, NewInput("POST", hdr("K", got), "", nil))
		if err != nil || back != tt.key {
			t.Errorf("%q reads back as %q, %v", got, back, err)
		}
	}
}

// FuzzKeyHeader: whatever one field line holds, reading it as a key never
// panics; a value it accepts is a bare value without a comma or the string
// of a valid Structured Field, and a valid key survives the round trip
// through FormatKeyHeader.
func FuzzKeyHeader(f *testing.F) {
	for _, s := range []string{"evt_184", `"evt_184"`, `"a\"b"`, `"unterminated`, "a,b", `"a";p=1`, `"`, `""`, " \"x\" ", `"a\qb"`} {
		f.Add(s)
	}
	tmpl := []Template{MustParseTemplate("{header.K}")}
	f.Fuzz(func(t *testing.T, line string) {
		key, idx, err := DeriveKey(tmpl, NewInput("POST", http.Header{"K": {line}}, "", nil))
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) || key != "" {
				t.Fatalf("%q: %q, %v", line, key, err)
			}
			return
		}
		v := strings.Trim(line, " \t")
		if strings.HasPrefix(v, `"`) {
			if _, perr := httpsfv.UnmarshalItem([]string{v}); perr != nil {
				t.Fatalf("%q accepted as %q, but it is no Structured Field", line, key)
			}
		} else if strings.Contains(key, ",") || key != v {
			t.Fatalf("bare %q read as %q", line, key)
		}
		if idx == 0 && ValidateKey(key) == nil {
			sf, err := FormatKeyHeader(key)
			if err != nil {
				t.Fatalf("FormatKeyHeader(%q): %v", key, err)
			}
			back, _, err := DeriveKey(tmpl, NewInput("POST", http.Header{"K": {sf}}, "", nil))
			if err != nil || back != key {
				t.Fatalf("%q -> %q -> %q, %v", key, sf, back, err)
			}
		}
	})
}

func TestParseKeyHeader(t *testing.T) {
	for _, key := range []string{"evt_184", "with space", `q"uote`, `back\slash`} {
		v, err := FormatKeyHeader(key)
		if err != nil {
			t.Fatalf("FormatKeyHeader(%q): %v", key, err)
		}
		if got := ParseKeyHeader(v); got != key {
			t.Errorf("ParseKeyHeader(%q) = %q, want %q", v, got, key)
		}
	}
	if got := ParseKeyHeader("bare-key"); got != "bare-key" {
		t.Errorf("ParseKeyHeader(bare-key) = %q", got)
	}
}
