package signature

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
)

// GitHub's published example ("Validating webhook deliveries"): the
// secret "It's a Secret to Everybody" and the payload "Hello, World!"
// give this X-Hub-Signature-256.
const (
	githubSecret = "It's a Secret to Everybody"
	githubBody   = "Hello, World!"
	githubSig    = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func TestGitHub(t *testing.T) {
	v := newVerifier(t, flat(config.SchemeGitHub, "{file./run/secrets/github}"), env{"{file./run/secrets/github}": githubSecret})
	sig := func(value string) http2 { return http2{"X-Hub-Signature-256", value} }
	other := "sha256=" + strings.Repeat("0", 64)
	for _, tt := range []struct {
		name   string
		h      http2
		body   string
		sender string
		reason Reason
	}{
		{"published example", sig(githubSig), githubBody, "github:default", ""},
		{"tampered body", sig(githubSig), "Hello, World?", "", Mismatch},
		{"tampered signature", sig(other), githubBody, "", Mismatch},
		{"missing header", nil, githubBody, "", Missing},
		{"the SHA-1 header only", http2{"X-Hub-Signature", "sha1=" + strings.Repeat("0", 40)}, githubBody, "", Missing},
		{"no prefix", sig(strings.TrimPrefix(githubSig, "sha256=")), githubBody, "", Malformed},
		{"wrong prefix", sig("sha1=" + strings.TrimPrefix(githubSig, "sha256=")), githubBody, "", Malformed},
		{"not hex", sig("sha256=" + strings.Repeat("g", 64)), githubBody, "", Malformed},
		{"too long", sig(githubSig + "00"), githubBody, "", Malformed},
		{"oversized header", sig("sha256=" + strings.Repeat("0", MaxHeaderLen)), githubBody, "", Malformed},
	} {
		// GitHub signs no timestamp: any time verifies.
		check(t, v, []vector{{tt.name, headers(tt.h...), tt.body, time.Unix(0, 0), tt.sender, tt.reason}})
	}
}

// http2 is a header name and value, for tables.
type http2 = []string
