package store

import (
	"fmt"
	"net/http"
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
