package store

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
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
	for _, tc := range []struct {
		name, ct, body, indent string
		kind, text             string
		n                      int
	}{
		{"empty", "application/json", "", "", BodyEmpty, "", 0},
		{"binary", "application/octet-stream", "\xff\xfe\x00", "", BodyBinary, "", 0},
		{"json, one line", "application/json", `{"id":"D-1","password":"p","n":[1,{"api_key":"k"}]}`, "",
			BodyJSON, `{"id":"D-1","password":"[redacted]","n":[1,{"api_key":"[redacted]"}]}`, 2},
		{"json, indented", "application/json", `{"a":{"token":"t"},"e":{},"l":[]}`, "  ",
			BodyJSON, "{\n  \"a\": {\n    \"token\": \"[redacted]\"\n  },\n  \"e\": {},\n  \"l\": []\n}", 1},
		{"json as text/plain", "text/plain", `{"client_secret":"s","id":1}`, "", BodyJSON, `{"client_secret":"[redacted]","id":1}`, 1},
		{"json with a BOM", "application/json", "\ufeff" + `{"access_token":"t"}`, "", BodyJSON, `{"access_token":"[redacted]"}`, 1},
		{"json scalar", "application/json", `"just a string"`, "", BodyJSON, `"just a string"`, 0},
		{"redact_fields, any case", "application/json", `{"CARD_NUMBER":"4111","card":"x"}`, "", BodyJSON, `{"CARD_NUMBER":"[redacted]","card":"x"}`, 1},
		{"credential-like names", "application/json", `{"Authorization":"a","secret":"b","private_key":"c","apikey":"d","credentials":"e","keep":"f"}`, "",
			BodyJSON, `{"Authorization":"[redacted]","secret":"[redacted]","private_key":"[redacted]","apikey":"[redacted]","credentials":"[redacted]","keep":"f"}`, 5},
		{"form", "application/x-www-form-urlencoded", "access_token=t%20x&token_type=bearer&scope=a+b", "", BodyForm, "access_token=[redacted]&token_type=[redacted]&scope=a+b", 2},
		{"form, escaped name", "application/x-www-form-urlencoded", "client%5Fsecret=s&id=1", "", BodyForm, "client%5Fsecret=[redacted]&id=1", 1},
		{"form shaped text/plain", "text/plain; charset=utf-8", "id=D-5&api_key=k", "", BodyForm, "id=D-5&api_key=[redacted]", 1},
		{"form shaped, no Content-Type", "", "password=p", "", BodyForm, "password=[redacted]", 1},
		{"prose is text", "text/plain", "token expired, try again", "", BodyText, "token expired, try again", 0},
		{"html is text", "text/html", "password=p", "", BodyText, "password=p", 0},
		{"invalid json is text", "application/json", `{"password":`, "", BodyText, `{"password":`, 0},
	} {
		got := r.Body([]byte(tc.body), tc.ct, tc.indent)
		if got.Kind != tc.kind || got.Text != tc.text || got.Redactions != tc.n {
			t.Errorf("%s: %+v, want kind %q, %d redactions, text %q", tc.name, got, tc.kind, tc.n, tc.text)
		}
	}
	deep := strings.Repeat(`{"a":`, maxRedactDepth+5) + `{"token":"deep"}` + strings.Repeat("}", maxRedactDepth+5)
	if got := r.Body([]byte(deep), "application/json", ""); strings.Contains(got.Text, `"deep"`) || !strings.Contains(got.Text, "nested too deeply") {
		t.Errorf("too deep: %s", got.Text)
	}
}
