package keying

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestURLTemplateResolve(t *testing.T) {
	u, err := ParseURLTemplate("{env.CRM_URL}/crm/deals/{body.deal.id}?source_key={key}&id={key_id}&q={query.q}&h={header.X-Tenant}")
	if err != nil {
		t.Fatal(err)
	}
	in := NewInput("POST", map[string][]string{"X-Tenant": {"acme corp"}}, "q=a%26b", []byte(`{"deal":{"id":"x/../y?"}}`))
	got, ok, err := u.Resolve("evt 184&x=1", "0123abcd", in)
	want := "{env.CRM_URL}/crm/deals/x%2F..%2Fy%3F?source_key=evt%20184%26x%3D1&id=0123abcd&q=a%26b&h=acme%20corp"
	if err != nil || !ok || got != want {
		t.Fatalf("Resolve = %q, %v, %v\nwant %q", got, ok, err, want)
	}
	t.Setenv("CRM_URL", "http://127.0.0.1:9001")
	if e := ExpandEnv(got); e != "http://127.0.0.1:9001"+want[len("{env.CRM_URL}"):] {
		t.Errorf("ExpandEnv = %q", e)
	}
	if _, ok, err := u.Resolve("k", "id", NewInput("POST", nil, "", []byte(`{}`))); ok || err != nil {
		t.Errorf("an empty placeholder: ok %v, err %v; want not ok", ok, err)
	}
	if _, _, err := u.Resolve("k", "id", NewInput("POST", nil, "", []byte(`{`))); err == nil {
		t.Error("a body placeholder on a body that is not JSON: no error")
	}
	t.Setenv("CRM_TOKEN", "s3cr3t")
	if e := ExpandEnv("Bearer {env.CRM_TOKEN} {env.UNSET_VARIABLE_X}{not.env} {env.bad-name}"); e != "Bearer s3cr3t {not.env} {env.bad-name}" {
		t.Errorf("ExpandEnv = %q", e)
	}
}

func TestParseURLTemplateErrors(t *testing.T) {
	long := "http://crm/" + strings.Repeat("a", MaxURLTemplate)
	for _, tt := range []struct{ in, want string }{
		{"https://crm.example/deals/{key}", ""},
		{"{env.CRM_URL}/deals?k={key_id}&e={body.event.id}", ""},
		{"ftp://crm/x?k={key}", `"ftp://crm/x?k={key}" is not an absolute http or https URL (or one whose base is an {env.NAME} placeholder)`},
		{"/deals/{key}", `"/deals/{key}" is not an absolute http or https URL (or one whose base is an {env.NAME} placeholder)`},
		{"http://crm/{nope}", `"http://crm/{nope}": placeholder {nope}: "nope" has no source (want {header.NAME}, {query.NAME}, {form.NAME} or {body.PATH}) (or {key}, {record_id}, {env.NAME})`},
		{"http://crm/{env.1X}", `"http://crm/{env.1X}": placeholder {env.1X}: "1X" is not an environment variable name`},
		{"http://crm/{key", `"http://crm/{key": unbalanced '{' at offset 11`},
		{"http://crm/key}", `"http://crm/key}": unbalanced '}' at offset 14`},
		{"http://crm/a b", `"http://crm/a b": byte 0x20 at offset 12 (a URL is visible ASCII; escape it)`},
		{long, "is longer than 2048 bytes"},
		{long[:80] + "{", `"` + long[:64] + `"...: unbalanced '{' at offset 80`},
	} {
		u, err := ParseURLTemplate(tt.in)
		if got := fmt.Sprint(err); tt.want == "" && err != nil || tt.want != "" && got != tt.want {
			t.Errorf("ParseURLTemplate(%.40q) error:\n got %v\nwant %s", tt.in, err, tt.want)
		}
		if u.String() != tt.in {
			t.Errorf("String() = %q, want %q", u.String(), tt.in)
		}
	}
	if !(URLTemplate{}).IsZero() {
		t.Error("zero URLTemplate is not IsZero")
	}
}

func TestCheckEnvText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"Bearer {env.CRM_TOKEN}", ""},
		{"static", ""},
		{"a\x01b", "has a control character at offset 1"},
		{"{header.Authorization}", "placeholder {header.Authorization}: headers take static text and {env.NAME} only (they are filled in when the check runs, and never stored)"},
		{"Bearer {env.X", `"Bearer {env.X": unbalanced '{'`},
	} {
		if got := fmt.Sprint(CheckEnvText(tt.in)); tt.want == "" && got != "<nil>" || tt.want != "" && got != tt.want {
			t.Errorf("CheckEnvText(%q) = %s, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzParseURLTemplate checks that parsing and resolving never panic, and
// that a resolved URL keeps the template's literal text and holds no brace
// but those of {env.NAME}, each request value escaped.
func FuzzParseURLTemplate(f *testing.F) {
	for _, s := range []string{
		"https://crm/deals?k={key}", "{env.CRM_URL}/x/{body.id}?h={header.X}&q={query.q}&f={form.f}",
		"http://crm/{key_id}", "http://crm/{", "http://crm/}", "http://{body.id}/x", "http://crm{key}/x", "http://u@crm:1/{key}", "{env.}", "http://a/{env.A}{key}", "http://crm/a b",
	} {
		f.Add(s, "evt {1}/&x", `{"id":"a}b{"}`)
	}
	f.Fuzz(func(t *testing.T, s, key, body string) {
		u, err := ParseURLTemplate(s)
		if err != nil {
			return
		}
		in := NewInput("POST", map[string][]string{"X": {"{v}"}}, "q=%7B", []byte(body))
		got, ok, err := u.Resolve(key, "0123", in)
		if err != nil || !ok {
			return
		}
		rest := envRE.ReplaceAllString(got, "")
		if strings.ContainsAny(rest, "{} ") {
			t.Fatalf("Resolve(%q) = %q: a raw brace or space outside {env.NAME}", s, got)
		}
		// The host is the template's: no request value reaches it.
		if strings.Contains(s, "{env.") {
			return
		}
		want, err1 := url.Parse(placeholderRE.ReplaceAllString(s, "0"))
		have, err2 := url.Parse(got)
		if err1 == nil && err2 == nil && (have.Host != want.Host || have.Scheme != want.Scheme || have.User.String() != want.User.String()) {
			t.Fatalf("Resolve(%q) = %q: scheme, userinfo or host %s %v %s, the template's are %s %v %s", s, got, have.Scheme, have.User, have.Host, want.Scheme, want.User, want.Host)
		}
	})
}

// TestMatchTemplate: a found.match template resolves to the values as
// they are (no escaping), and takes no {env.NAME}.
func TestMatchTemplate(t *testing.T) {
	m, err := ParseMatchTemplate("{key}|{key_id}|{body.deal.id}|{header.X-Tenant}")
	if err != nil {
		t.Fatal(err)
	}
	in := NewInput("POST", map[string][]string{"X-Tenant": {"acme corp"}}, "", []byte(`{"deal":{"id":"x/../y?"}}`))
	if got, ok, err := m.ResolveText("evt 184&x=1", "0123abcd", in); err != nil || !ok || got != "evt 184&x=1|0123abcd|x/../y?|acme corp" {
		t.Errorf("ResolveText = %q, %v, %v", got, ok, err)
	}
	if _, ok, err := m.ResolveText("k", "id", NewInput("POST", nil, "", []byte(`{}`))); ok || err != nil {
		t.Errorf("an empty placeholder: ok %v, err %v; want not ok", ok, err)
	}
	for _, tt := range []struct{ in, want string }{
		{"created", ""},
		{"{env.CRM_TOKEN}", `"{env.CRM_TOKEN}": placeholder {env.CRM_TOKEN}: {env.NAME} is not allowed here (the value is compared with the answer, not sent)`},
		{"{nope}", `"{nope}": placeholder {nope}: "nope" has no source (want {header.NAME}, {query.NAME}, {form.NAME} or {body.PATH}) (or {key}, {record_id})`},
		{"a b", `"a b": byte 0x20 at offset 1 (literal text is visible ASCII)`},
		{"{key", `"{key": unbalanced '{' at offset 0`},
	} {
		_, err := ParseMatchTemplate(tt.in)
		if got := fmt.Sprint(err); (tt.want == "" && err != nil) || (tt.want != "" && got != tt.want) {
			t.Errorf("ParseMatchTemplate(%q) = %v, want %q", tt.in, err, tt.want)
		}
	}
}

// TestRecordIDPlaceholder: {record_id} is the record id in lookup URLs and
// match values; {key_id}, its older name, still reads the same.
func TestRecordIDPlaceholder(t *testing.T) {
	in := NewInput("POST", nil, "", []byte(`{}`))
	for _, name := range []string{"record_id", "key_id"} {
		u, err := ParseURLTemplate("http://crm/deals?id={" + name + "}")
		if err != nil {
			t.Fatalf("{%s} in a URL: %v", name, err)
		}
		if got, ok, err := u.Resolve("k", "0123abcd", in); err != nil || !ok || got != "http://crm/deals?id=0123abcd" {
			t.Errorf("{%s} in a URL resolves to %q, %v, %v", name, got, ok, err)
		}
		m, err := ParseMatchTemplate("{" + name + "}")
		if err != nil {
			t.Fatalf("{%s} in a match value: %v", name, err)
		}
		if got, ok, err := m.Resolve("k", "0123abcd", in); err != nil || !ok || got != "0123abcd" {
			t.Errorf("{%s} in a match value resolves to %q, %v, %v", name, got, ok, err)
		}
	}
}

// TestURLTemplateEscapes: request values in a lookup URL's path and query
// are escaped, so none can change its host, add a path segment, end its
// query parameter or start a fragment: '/', '?', '#', '@', '%2F', '\',
// ':' and white space come through as data. A value that would make a
// whole path segment "." or ".." (which a server resolves to another
// path) resolves to nothing: an error, and no URL.
func TestURLTemplateEscapes(t *testing.T) {
	u, err := ParseURLTemplate("http://crm.example:9001/deals/{body.id}/notes?k={key}&q={query.q}")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{
		"a/b", "../../admin", "x?y=1", "x#frag", "evil.example@x", "@evil.example", "%2F..%2Fadmin", `a\b`, "x:1",
		"a&k=other", "a b", "a+b", "//evil.example/x", "...", "..a", "a..", "%2e%2e", ";x=1", "\u00e9",
	} {
		in := NewInput("POST", nil, "q="+urlEscape(v), []byte(`{"id":`+strconv.Quote(v)+`}`))
		got, ok, err := u.Resolve(v, "0123", in)
		if err != nil || !ok {
			t.Errorf("%q: Resolve = %q, %v, %v", v, got, ok, err)
			continue
		}
		p, err := url.Parse(got)
		if err != nil {
			t.Errorf("%q: %q does not parse: %v", v, got, err)
			continue
		}
		segs := strings.Split(p.EscapedPath(), "/")
		if p.Scheme != "http" || p.Host != "crm.example:9001" || p.User != nil || p.Fragment != "" || p.RawFragment != "" ||
			len(segs) != 4 || segs[1] != "deals" || segs[3] != "notes" || p.Path != "/deals/"+v+"/notes" {
			t.Errorf("%q: %q is %s host %q user %v path %q (segments %q) fragment %q", v, got, p.Scheme, p.Host, p.User, p.Path, segs, p.Fragment)
		}
		if q := p.Query(); len(q) != 2 || q.Get("k") != v || q.Get("q") != v {
			t.Errorf("%q: %q has query %v", v, got, q)
		}
	}
	for _, v := range []string{"..", "."} {
		in := NewInput("POST", nil, "q=x", []byte(`{"id":`+strconv.Quote(v)+`}`))
		if got, ok, err := u.Resolve("k", "0123", in); err == nil || ok || got != "" {
			t.Errorf("a path segment %q: Resolve = %q, %v, %v; want an error", v, got, ok, err)
		}
	}
	// In the query, dots are data like any other.
	q, _ := ParseURLTemplate("http://crm.example/deals?k={key}")
	if got, ok, err := q.Resolve("..", "0123", NewInput("GET", nil, "", nil)); err != nil || !ok || got != "http://crm.example/deals?k=.." {
		t.Errorf("\"..\" in the query: Resolve = %q, %v, %v", got, ok, err)
	}
}
