package config

import "testing"

// TestCallerCredentials: which placeholders copy a caller's credentials,
// with the scope ["{header.X-Tenant-Id}", "{query.account}"].
func TestCallerCredentials(t *testing.T) {
	c := newCallerCredentials([]string{"{header.x-tenant-id}:{query.account}"})
	for _, tc := range []struct {
		placeholder, why string
	}{
		{"header.Authorization", "the Authorization header"},
		{"header.authorization", "the Authorization header"},
		{"http.request.header.Authorization", "the Authorization header"},
		{"header.Proxy-Authorization", "the Proxy-Authorization header"},
		{"header.Cookie", "the Cookie header"},
		{"cookie.sid", "a cookie"},
		{"http.request.cookie.sid", "a cookie"},
		{"header.X-Tenant-Id", "the route's scope uses it"},
		{"query.account", "the route's scope uses it"},
		{"http.request.uri.query.account", "the route's scope uses it"},
		{"header.X-Api-Key", "its name says so"},
		{"header.X-Auth-Token", "its name says so"},
		{"query.access_token", "its name says so"},
		{"form.password", "its name says so"},
		{"body.client.clientSecret", "its name says so"},
		{"body.session_id", "its name says so"},
		{"header.X-Hub-Signature", "its name says so"},
		{"body.pwd", "its name says so"},
		{"body.creds.accessKeyId", "its name says so"},
		{"form.client_assertion", "its name says so"},
		{"body.key_passphrase", "its name says so"},
		// Not credentials.
		{"key", ""},
		{"key_id", ""},
		{"record_id", ""},
		{"env.CRM_TOKEN", ""}, // the gateway's own, filled in when the check runs
		{"header.Idempotency-Key", ""},
		{"body.id", ""},
		{"body.author", ""},
		{"query.account_name", ""},
		{"form.account", ""}, // the scope's is a query parameter
		{"http.request.uri", ""},
	} {
		if got := c.why(tc.placeholder); got != tc.why {
			t.Errorf("{%s}: %q, want %q", tc.placeholder, got, tc.why)
		}
	}
}
