package signature

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
)

// TestNewRefusesWeakSecrets: a secret under 16 bytes after decoding
// (Stripe's whsec_ alone, one byte, a space) is a provisioning error
// naming the sender and the placeholder, never the value; 16 bytes are
// accepted.
func TestNewRefusesWeakSecrets(t *testing.T) {
	b64 := func(n int) string {
		return "whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", n)))
	}
	for _, tt := range []struct {
		name   string
		scheme config.SignatureScheme
		secret string
		want   string // "" when accepted
	}{
		{"stripe whsec_ alone", config.SchemeStripe, "whsec_", "is 0 bytes after whsec_, at least 16 needed"},
		{"stripe short", config.SchemeStripe, "whsec_abc123", "is 6 bytes after whsec_, at least 16 needed"},
		{"stripe 16 bytes", config.SchemeStripe, "whsec_" + strings.Repeat("s", 16), ""},
		{"github one byte", config.SchemeGitHub, "x", "is 1 bytes, at least 16 needed"},
		{"github a space", config.SchemeGitHub, " ", "is blank"},
		{"github spaces", config.SchemeGitHub, strings.Repeat(" ", 20), "is blank"},
		{"github 15 bytes", config.SchemeGitHub, strings.Repeat("g", 15), "is 15 bytes, at least 16 needed"},
		{"github 16 bytes", config.SchemeGitHub, strings.Repeat("g", 16), ""},
		{"hmac a space", config.SchemeHMAC, " ", "is blank"},
		{"hmac 16 bytes", config.SchemeHMAC, strings.Repeat("h", 16), ""},
		{"standard webhooks 8 bytes", config.SchemeStandardWebhooks, b64(8), "is 8 bytes once decoded, at least 16 needed"},
		{"standard webhooks 16 bytes", config.SchemeStandardWebhooks, b64(16), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rule := flat(tt.scheme, "{env.S}")
			if tt.scheme == config.SchemeHMAC {
				rule.Header, rule.Algorithm, rule.Encoding, rule.Signed = "X-Sig", "sha256", "hex", "{body}"
			}
			_, err := New(rule, env{"{env.S}": tt.secret}.resolve)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want == "":
				return
			case err == nil:
				t.Fatalf("accepted; want an error saying %q", tt.want)
			}
			if want := "signature: sender default, secret 0 ({env.S}): " + tt.want; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("err = %v\nwant it to begin %q", err, want)
			}
			if v := strings.TrimPrefix(tt.secret, "whsec_"); strings.TrimSpace(v) != "" && strings.Contains(err.Error(), v) {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}
