package operator

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestIsCredentialHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"Set-Cookie", true}, {"set-cookie", true}, {"Set-Cookie2", true}, {"Cookie", true},
		{"Authorization", true}, {"Proxy-Authorization", true}, {"WWW-Authenticate", true}, {"Authentication-Info", true},
		{"X-Api-Key", true}, {"Api-Key", true}, {"X_API_KEY", true}, {"X-Apikey", true}, {"Idempotency-Key", true}, {"key", true},
		{"X-Auth-Token", true}, {"X-Amz-Security-Token", true}, {"X-Csrf-Token", true}, {"X-XSRF", true},
		{"X-Client-Secret", true}, {"X-Password", true}, {"X-Passwd", true}, {"X-Session-Id", true},
		{"X-Jwt-Assertion", true}, {"X-Hub-Signature-256", true}, {"Access-Control-Allow-Credentials", true},
		{"Content-Type", false}, {"Location", false}, {"Etag", false}, {"X-Request-Id", false},
		{"Cache-Control", false}, {"X-Deal", false}, {"Content-Security-Policy", false},
		{"Keep-Alive", false}, {"X-Monkey", false}, {"X-Keyboard", false}, {"Strict-Transport-Security", false},
	} {
		if got := IsCredentialHeader(tc.name); got != tc.want {
			t.Errorf("IsCredentialHeader(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRedactHeader(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want http.Header
	}{
		{"nil", nil, nil},
		{"nothing to hide", http.Header{"Content-Type": {"application/json"}, "Location": {"/deals/D-1"}},
			http.Header{"Content-Type": {"application/json"}, "Location": {"/deals/D-1"}}},
		{"cookies keep name and attributes",
			http.Header{"Set-Cookie": {"sid=abc123; Path=/; HttpOnly", "theme=dark", "b=; Max-Age=0", "=odd", "noequals", `"q"=x`}},
			http.Header{"Set-Cookie": {"sid=[redacted]; Path=/; HttpOnly", "theme=[redacted]", "b=[redacted]; Max-Age=0", Redacted, Redacted, Redacted}}},
		{"every value of other credentials",
			http.Header{"Authorization": {"Bearer x"}, "X-Api-Key": {"k1", "k2"}, "Cookie": {"a=1; b=2"}, "X-Deal": {"D-1"}},
			http.Header{"Authorization": {Redacted}, "X-Api-Key": {Redacted, Redacted}, "Cookie": {Redacted}, "X-Deal": {"D-1"}}},
		{"non-canonical names", http.Header{"x-auth-token": {"t"}, "set-cookie": {"a=1"}},
			http.Header{"x-auth-token": {Redacted}, "set-cookie": {"a=" + Redacted}}},
		{"empty values stay counted", http.Header{"X-Session-Id": {""}}, http.Header{"X-Session-Id": {Redacted}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprint(tc.in)
			got := RedactHeader(tc.in)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("RedactHeader\n got %v\nwant %v", got, tc.want)
			}
			if fmt.Sprint(tc.in) != before {
				t.Errorf("the input was changed: %v", tc.in)
			}
		})
	}
	// The copy shares no slices with the input.
	in := http.Header{"X-Deal": {"D-1"}}
	RedactHeader(in)["X-Deal"][0] = "changed"
	if in.Get("X-Deal") != "D-1" {
		t.Error("RedactHeader's result aliases the input")
	}
}

func TestRedactorBody(t *testing.T) {
	r := NewRedactor([]string{"Card_Number"})
	digest := func(body string) string {
		return fmt.Sprintf("%d bytes, sha256 %x", len(body), sha256.Sum256([]byte(body)))
	}
	for _, tc := range []struct {
		name, ct, body, indent string
		show                   bool // WithUnparsed(true): a route's show_unparsed_bodies
		kind, text             string
		n                      int
	}{
		{"empty", "application/json", "", "", false, BodyEmpty, "", 0},
		{"binary", "application/octet-stream", "\xff\xfe\x00", "", false, BodyUnparsed, digest("\xff\xfe\x00"), 0},
		{"binary, shown", "application/octet-stream", "\xff\xfe\x00", "", true, BodyBinary, "", 0},
		{"json, one line", "application/json", `{"id":"D-1","password":"p","n":[1,{"api_key":"k"}]}`, "", false,
			BodyJSON, `{"id":"D-1","password":"[redacted]","n":[1,{"api_key":"[redacted]"}]}`, 2},
		{"json, indented", "application/json", `{"a":{"token":"t"},"e":{},"l":[]}`, "  ", false,
			BodyJSON, "{\n  \"a\": {\n    \"token\": \"[redacted]\"\n  },\n  \"e\": {},\n  \"l\": []\n}", 1},
		{"json as text/plain", "text/plain", `{"client_secret":"s","id":1}`, "", false, BodyJSON, `{"client_secret":"[redacted]","id":1}`, 1},
		{"json with a BOM", "application/json", "\ufeff" + `{"access_token":"t"}`, "", false, BodyJSON, `{"access_token":"[redacted]"}`, 1},
		{"json scalar", "application/json", `"just a string"`, "", false, BodyJSON, `"just a string"`, 0},
		{"redact_fields, any case", "application/json", `{"CARD_NUMBER":"4111","card":"x"}`, "", false, BodyJSON, `{"CARD_NUMBER":"[redacted]","card":"x"}`, 1},
		{"credential-like names", "application/json", `{"Authorization":"a","secret":"b","private_key":"c","apikey":"d","credentials":"e","keep":"f"}`, "", false,
			BodyJSON, `{"Authorization":"[redacted]","secret":"[redacted]","private_key":"[redacted]","apikey":"[redacted]","credentials":"[redacted]","keep":"f"}`, 5},
		{"more credential-like names", "application/json", `{"pwd":"a","accessKeyId":"b","secretAccessKey":"c","client_assertion":"d","passphrase":"e","PRIVATEKEY":"f","access_key":"g","region":"h"}`, "", false,
			BodyJSON, `{"pwd":"[redacted]","accessKeyId":"[redacted]","secretAccessKey":"[redacted]","client_assertion":"[redacted]","passphrase":"[redacted]","PRIVATEKEY":"[redacted]","access_key":"[redacted]","region":"h"}`, 7},
		{"xssi prefix kept", "application/json", ")]}'\n{\"token\":\"t\",\"id\":1}", "", false, BodyJSON, ")]}'\n{\"token\":\"[redacted]\",\"id\":1}", 1},
		{"xssi prefix with a comma", "application/json", ")]}',\n[{\"pwd\":\"p\"}]", "  ", false, BodyJSON, ")]}',\n[\n  {\n    \"pwd\": \"[redacted]\"\n  }\n]", 1},
		{"while(1) prefix", "application/json", `while(1);{"secret":"s"}`, "", false, BodyJSON, `while(1);{"secret":"[redacted]"}`, 1},
		{"ndjson, each value on its line", "application/x-ndjson", "{\"id\":1, \"token\":\"a\"}\r\n\n{\"id\":2,\"token\":\"b\"}\n", "  ", false,
			BodyNDJSON, "{\"id\":1,\"token\":\"[redacted]\"}\r\n\n{\"id\":2,\"token\":\"[redacted]\"}\n", 2},
		{"ndjson without a final newline", "", "[1]\n{\"password\":\"p\"}", "", false, BodyNDJSON, "[1]\n{\"password\":\"[redacted]\"}", 1},
		{"json in a json string", "application/json", `{"id":"D-1","payload":"{\"client_secret\":\"s\",\"n\":1}","note":"{not json"}`, "", false,
			BodyJSON, `{"id":"D-1","payload":"{\"client_secret\":\"[redacted]\",\"n\":1}","note":"{not json"}`, 1},
		{"json in a string in a json string", "application/json", `{"a":"{\"b\":\"{\\\"token\\\":\\\"t\\\"}\"}"}`, "", false,
			BodyJSON, `{"a":"{\"b\":\"{\\\"token\\\":\\\"[redacted]\\\"}\"}"}`, 1},
		{"json string without credentials kept as stored", "application/json", `{"payload":"{\"n\": 1}","q":"a=1&b=2"}`, "", false,
			BodyJSON, `{"payload":"{\"n\": 1}","q":"a=1&b=2"}`, 0},
		{"form in a json string", "application/json", `{"body":"grant_type=x&client_assertion=jwt"}`, "", false,
			BodyJSON, `{"body":"grant_type=x&client_assertion=[redacted]"}`, 1},
		{"form", "application/x-www-form-urlencoded", "access_token=t%20x&token_type=bearer&scope=a+b", "", false, BodyForm, "access_token=[redacted]&token_type=[redacted]&scope=a+b", 2},
		{"form, escaped name", "application/x-www-form-urlencoded", "client%5Fsecret=s&id=1", "", false, BodyForm, "client%5Fsecret=[redacted]&id=1", 1},
		{"form shaped text/plain", "text/plain; charset=utf-8", "id=D-5&api_key=k", "", false, BodyForm, "id=D-5&api_key=[redacted]", 1},
		{"form shaped, no Content-Type", "", "password=p", "", false, BodyForm, "password=[redacted]", 1},
		{"form, ; separated", "application/x-www-form-urlencoded", "a=1;password=p&pwd=q;;b=2", "", false, BodyForm, "a=1;password=[redacted]&pwd=[redacted];;b=2", 2},
		{"prose", "text/plain", "token expired, try again", "", false, BodyUnparsed, digest("token expired, try again"), 0},
		{"prose, shown", "text/plain", "token expired, try again", "", true, BodyText, "token expired, try again", 0},
		{"html", "text/html", "password=p", "", false, BodyUnparsed, digest("password=p"), 0},
		{"html, shown", "text/html", "password=p", "", true, BodyText, "password=p", 0},
		{"invalid json", "application/json", `{"password":`, "", false, BodyUnparsed, digest(`{"password":`), 0},
		{"invalid json, shown", "application/json", `{"password":`, "", true, BodyText, `{"password":`, 0},
		{"xssi prefix before no json", "application/json", ")]}'\n<b>", "", false, BodyUnparsed, digest(")]}'\n<b>"), 0},
		{"a json line, then text", "", "{\"a\":1}\nsecret: s\n", "", false, BodyUnparsed, digest("{\"a\":1}\nsecret: s\n"), 0},
		{"blank lines", "", "\n\n", "", false, BodyUnparsed, digest("\n\n"), 0},
		{"opting in changes no parsed body", "application/json", `{"token":"t"}`, "", true, BodyJSON, `{"token":"[redacted]"}`, 1},
	} {
		got := r.WithUnparsed(tc.show).Body([]byte(tc.body), tc.ct, tc.indent)
		if got.Kind != tc.kind || got.Text != tc.text || got.Redactions != tc.n {
			t.Errorf("%s: %+v, want kind %q, %d redactions, text %q", tc.name, got, tc.kind, tc.n, tc.text)
		}
	}
	deep := strings.Repeat(`{"a":`, maxRedactDepth+5) + `{"token":"deep"}` + strings.Repeat("}", maxRedactDepth+5)
	if got := r.Body([]byte(deep), "application/json", ""); strings.Contains(got.Text, `"deep"`) || !strings.Contains(got.Text, "nested too deeply") {
		t.Errorf("too deep: %s", got.Text)
	}
	for _, inner := range []string{`"{\"token\":\"s3cr3t\"}"`, `"password=s3cr3t"`} {
		deep = strings.Repeat("[", maxRedactDepth) + inner + strings.Repeat("]", maxRedactDepth)
		if got := r.Body([]byte(deep), "application/json", ""); strings.Contains(got.Text, "s3cr3t") || !strings.Contains(got.Text, "nested too deeply") {
			t.Errorf("a string too deep to look into: %s", got.Text)
		}
	}
	deep = strings.Repeat("[", maxRedactDepth) + `"plain"` + strings.Repeat("]", maxRedactDepth)
	if got := r.Body([]byte(deep), "application/json", ""); !strings.Contains(got.Text, `"plain"`) {
		t.Errorf("a plain string too deep to look into: %s", got.Text)
	}
}

// TestCredentialNames: the names redaction hides, and the trade-off it
// makes: a name that contains a credential word is hidden even when it is
// harmless (tokenizer_version, author), since a guess that shows a
// secret cannot be taken back.
func TestCredentialNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"pwd", true}, {"db_pwd", true}, {"userPwd", true}, {"passwd", true}, {"passphrase", true},
		{"accessKeyId", true}, {"AccessKey", true}, {"secretAccessKey", true}, {"access_key", true}, {"aws_access_key_id", true},
		{"client_assertion", true}, {"clientAssertion", true}, {"privatekey", true}, {"private_key", true},
		{"authorization", true}, {"cookie", true}, {"session", true}, {"signature", true},
		{"tokenizer_version", true}, {"author", true}, // hidden too: the rule errs on the side of hiding
		{"id", false}, {"region", false}, {"keyboard", false}, {"monkey", false}, {"assert_count", false}, {"access", false},
		{"password_hint_shown", true}, {"description", false}, {"pw", false},
	} {
		if got := NewRedactor(nil).Hides(tc.name); got != tc.want {
			t.Errorf("Hides(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// redactShapes are body shapes that carry a credential (each value holds
// "LEAK"), as a red team stored them through the gateway and read them
// back in the admin API's record view and the console: the JSON family
// field by field, the rest only by size and digest.
var redactShapes = []struct {
	name, ct, body string
	parsed         bool // JSON family or a form: shown with the values hidden; else size and digest only
}{
	{"json", "application/json", `{"id":"D-1","password":"LEAK-json"}`, true},
	{"ndjson", "application/x-ndjson", "{\"id\":\"D-1\"}\n{\"id\":\"D-2\",\"password\":\"LEAK-ndjson\"}\n", true},
	{"xssi prefix", "application/json", ")]}'\n{\"id\":\"D-1\",\"token\":\"LEAK-xssi\"}", true},
	{"json in a json string", "application/json", `{"id":"D-1","payload":"{\"client_secret\":\"LEAK-nested\"}"}`, true},
	{"pwd", "application/json", `{"user":"a","pwd":"LEAK-pwd"}`, true},
	{"accessKeyId", "application/json", `{"accessKeyId":"LEAK-akid","region":"eu-west-1"}`, true},
	{"client_assertion", "application/x-www-form-urlencoded", "grant_type=client_credentials&client_assertion=LEAK-assertion", true},
	{"xml", "application/xml", `<deal><id>D-1</id><password>LEAK-xml</password></deal>`, false},
	{"multipart", "multipart/form-data; boundary=XyZ", "--XyZ\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nLEAK-multipart\r\n--XyZ--\r\n", false},
	{"semicolon form", "application/x-www-form-urlencoded", "a=1;password=LEAK-semicolon", true},
}

// TestRedactorBodyShapes: no credential of redactShapes survives into
// what an operator view shows; a body that cannot be parsed safely shows
// as "N bytes, sha256 HEX".
func TestRedactorBodyShapes(t *testing.T) {
	r := NewRedactor(nil)
	leaked := 0
	for _, tc := range redactShapes {
		got := r.Body([]byte(tc.body), tc.ct, "")
		sum := sha256.Sum256([]byte(tc.body))
		digest := fmt.Sprintf("%d bytes, sha256 %x", len(tc.body), sum)
		switch {
		case strings.Contains(got.Text, "LEAK"):
			leaked++
			t.Errorf("%s: the credential shows: %q (kind %q, %d redactions)", tc.name, got.Text, got.Kind, got.Redactions)
		case tc.parsed && got.Redactions == 0:
			t.Errorf("%s: nothing redacted: %q (kind %q)", tc.name, got.Text, got.Kind)
		case !tc.parsed && got.Text != digest:
			t.Errorf("%s: shown as %q (kind %q), want %q", tc.name, got.Text, got.Kind, digest)
		}
	}
	if leaked > 0 {
		t.Errorf("%d of %d shapes leaked a credential", leaked, len(redactShapes))
	}
}

// FuzzRedactorBody: Body never panics, shows text only as valid UTF-8,
// and whatever it lays out as JSON has no hidden member whose value is
// not "[redacted]", in the body and in the JSON its strings hold.
func FuzzRedactorBody(f *testing.F) {
	for _, tc := range redactShapes {
		f.Add([]byte(tc.body), tc.ct)
	}
	f.Add([]byte(`{"a":[{"token":{"x":1}},"{\"pwd\":[1]}"],"b":"k=v;secret=s"}`), "")
	f.Add([]byte("\ufeff{\"apiKey\":\"k\"}"), "text/plain")
	f.Fuzz(func(t *testing.T, body []byte, ct string) {
		r := NewRedactor([]string{"card"})
		got := r.Body(body, ct, "")
		if !utf8.ValidString(got.Text) || got.Redactions < 0 {
			t.Fatalf("Body(%q) = %+v", body, got)
		}
		if got.Kind != BodyJSON || strings.HasPrefix(string(body), ")]}'") || strings.HasPrefix(string(body), "while(1);") || strings.HasPrefix(string(body), "for(;;);") {
			return
		}
		var v any
		d := json.NewDecoder(strings.NewReader(got.Text))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatalf("Body(%q) laid out JSON that does not parse: %q: %v", body, got.Text, err)
		}
		if path := unredacted(r, v, 0); path != "" {
			t.Fatalf("Body(%q) = %q: the hidden member %s shows", body, got.Text, path)
		}
	})
}

// unredacted returns the path of a member of v that r hides whose value
// is not Redacted, looking into strings that hold JSON too (up to a few
// levels); "" when there is none.
func unredacted(r Redactor, v any, depth int) string {
	if depth > 8 {
		return ""
	}
	switch v := v.(type) {
	case map[string]any:
		for name, val := range v {
			if r.Hides(name) && val != Redacted {
				return name
			}
			if p := unredacted(r, val, depth+1); p != "" {
				return name + "." + p
			}
		}
	case []any:
		for i, val := range v {
			if p := unredacted(r, val, depth+1); p != "" {
				return fmt.Sprintf("%d.%s", i, p)
			}
		}
	case string:
		var inner any
		if json.Unmarshal([]byte(v), &inner) == nil {
			if p := unredacted(r, inner, depth+1); p != "" {
				return "(string)." + p
			}
		}
	}
	return ""
}
