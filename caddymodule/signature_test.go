package caddymodule

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWeakSignatureSecretRefused: a signature secret that resolves to
// under 16 bytes (whsec_ alone, one byte, a space) fails Provision with
// an error naming the route (its name and place), the sender's secret
// and its placeholder, and the rules file when there is one; never the
// value.
func TestWeakSignatureSecretRefused(t *testing.T) {
	for _, tc := range []struct{ name, scheme, value, want string }{
		{"whsec_ alone", "stripe", "whsec_", "is 0 bytes after whsec_"},
		{"one byte", "github", "k", "is 1 bytes"},
		{"a space", "github", " ", "is blank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("IDEMGATE_TEST_WHSEC", tc.value)
			_, _, err := newHandlerJSON(t, fmt.Sprintf(`{"routes":[{"name":"payments","match":{"path":"/webhooks"},"key":["{body.id}"],`+
				`"signature":{"scheme":%q,"secrets":["{env.IDEMGATE_TEST_WHSEC}"]}}],"store":{"engine":"embedded","dir":%q}}`, tc.scheme, t.TempDir()))
			want := "route payments (routes[0]): signature: sender default, secret 0 ({env.IDEMGATE_TEST_WHSEC}): " + tc.want
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Provision: %v; want an error saying %q", err, want)
			}
		})
	}
}

// TestWeakSignatureSecretInRulesFile: with rules_file the refusal names
// the file too.
func TestWeakSignatureSecretInRulesFile(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_WHSEC", "whsec_")
	file := filepath.Join(t.TempDir(), "webhooks.yaml")
	rules := "routes:\n  - name: payments\n    match: { path: /webhooks }\n    key: [\"{body.id}\"]\n" +
		"    signature: { scheme: stripe, secrets: [\"{env.IDEMGATE_TEST_WHSEC}\"] }\n"
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := newHandlerJSON(t, fmt.Sprintf(`{"rules_file":%q,"store":{"engine":"embedded","dir":%q}}`, file, t.TempDir()))
	want := "idempotency rules " + file + ": route payments (routes[0]): signature: sender default, secret 0 ({env.IDEMGATE_TEST_WHSEC}): is 0 bytes after whsec_"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Provision: %v; want an error saying %q", err, want)
	}
}
