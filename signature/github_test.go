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
	sig := func(value string) []string { return []string{"X-Hub-Signature-256", value} }
	other := "sha256=" + strings.Repeat("0", 64)
	// GitHub signs no timestamp: any time verifies.
	anyTime := time.Unix(0, 0)
	check(t, v, []vector{
		{"published example", sig(githubSig), githubBody, anyTime, "github:default", ""},
		{"tampered body", sig(githubSig), "Hello, World?", anyTime, "", Mismatch},
		{"tampered signature", sig(other), githubBody, anyTime, "", Mismatch},
		{"missing header", nil, githubBody, anyTime, "", Missing},
		{"the SHA-1 header only", []string{"X-Hub-Signature", "sha1=" + strings.Repeat("0", 40)}, githubBody, anyTime, "", Missing},
		{"no prefix", sig(strings.TrimPrefix(githubSig, "sha256=")), githubBody, anyTime, "", Malformed},
		{"wrong prefix", sig("sha1=" + strings.TrimPrefix(githubSig, "sha256=")), githubBody, anyTime, "", Malformed},
		{"not hex", sig("sha256=" + strings.Repeat("g", 64)), githubBody, anyTime, "", Malformed},
		{"too long", sig(githubSig + "00"), githubBody, anyTime, "", Malformed},
		{"oversized header", sig("sha256=" + strings.Repeat("0", MaxHeaderLen)), githubBody, anyTime, "", Malformed},
	})
}
