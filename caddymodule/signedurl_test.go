package caddymodule

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestSignedURL: the URL a twilio or square signature covers is the
// route's public URL and the request's query, or the request's own URL
// as the client sent it, with X-Forwarded-Proto and X-Forwarded-Host
// believed only from a trusted proxy.
func TestSignedURL(t *testing.T) {
	req := func(target string, trusted bool, tlsOn bool, headers ...string) *http.Request {
		r := httptest.NewRequest("POST", target, nil)
		r.Host = "10.0.0.5:8080"
		if !tlsOn {
			r.TLS = nil
		} else {
			r.TLS = &tls.ConnectionState{}
		}
		for i := 0; i < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{caddyhttp.TrustedProxyVarKey: trusted})
		orig := *r
		ctx = context.WithValue(ctx, caddyhttp.OriginalRequestCtxKey, orig)
		return r.WithContext(ctx)
	}
	fwd := []string{"X-Forwarded-Proto", "https, http", "X-Forwarded-Host", "hooks.example.com"}
	for _, tt := range []struct {
		name, public string
		r            *http.Request
		want         string
	}{
		{"configured, with the query", "https://hooks.example.com/twilio", req("/in/twilio?tenant=a%27b&x=1", false, false), "https://hooks.example.com/twilio?tenant=a%27b&x=1"},
		{"configured, no query", "https://hooks.example.com/sq", req("/in/sq", true, false, fwd...), "https://hooks.example.com/sq"},
		{"the request's, direct", "", req("/twilio?tenant=a%27b", false, false), "http://10.0.0.5:8080/twilio?tenant=a%27b"},
		{"the request's, over TLS", "", req("/twilio", false, true), "https://10.0.0.5:8080/twilio"},
		{"forwarded by a trusted proxy", "", req("/twilio?x=1", true, false, fwd...), "https://hooks.example.com/twilio?x=1"},
		{"forwarded headers from an untrusted client", "", req("/twilio", false, false, fwd...), "http://10.0.0.5:8080/twilio"},
		{"a forwarded proto that is no scheme", "", req("/twilio", true, false, "X-Forwarded-Proto", "gopher"), "http://10.0.0.5:8080/twilio"},
	} {
		if got := signedURL(tt.public, tt.r); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
