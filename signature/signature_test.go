package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
)

// env is a fake of Caddy's replacer: placeholders and their values.
type env map[string]string

func (e env) resolve(tmpl string) (string, error) {
	v, ok := e[tmpl]
	if !ok {
		return "", errors.New("unrecognized placeholder " + tmpl)
	}
	return v, nil
}

// newVerifier builds the verifier of rule with secrets from e.
func newVerifier(t *testing.T, rule config.SignatureRule, e env) *Verifier {
	t.Helper()
	v, err := New(rule, e.resolve)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// flat is a rule of one sender with the given secret placeholders.
func flat(scheme config.SignatureScheme, secrets ...string) config.SignatureRule {
	r := config.SignatureRule{Scheme: scheme, Senders: []config.SignatureSender{{Name: "default", Secrets: secrets}}}
	if scheme == config.SchemeStripe || scheme == config.SchemeStandardWebhooks {
		r.Tolerance = 5 * time.Minute
	}
	return r
}

// headers builds a header from name, value pairs (Add, so that a name
// may repeat).
func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// vector is one request (its headers as name, value pairs) and what
// verifying it must give.
type vector struct {
	name   string
	h      []string
	body   string
	now    time.Time
	sender string // "" for a refusal
	reason Reason
}

func check(t *testing.T, v *Verifier, tests []vector) {
	t.Helper()
	for _, tt := range tests {
		sender, reason, ok := v.CheckSignature(headers(tt.h...), []byte(tt.body), tt.now)
		if ok != (tt.sender != "") || sender != tt.sender || reason != tt.reason {
			t.Errorf("%s: CheckSignature = %q, %q, %v; want %q, %q", tt.name, sender, reason, ok, tt.sender, tt.reason)
		}
	}
}

// stripeSig signs body at t as Stripe does: hex HMAC-SHA256 of
// "<t>.<body>" keyed by the secret string.
func stripeSig(secret, t, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(t + "." + body))
	return hex.EncodeToString(mac.Sum(nil))
}

// TestRotation: during a rotation the old and the new secret are both
// listed and both accepted, with the same identity; once the old one is
// removed its signatures are refused.
func TestRotation(t *testing.T) {
	e := env{"{env.OLD}": "whsec_old_signing_secret_01", "{env.NEW}": "whsec_new_signing_secret_02"}
	now, ts, body := time.Unix(1700000000, 0), "1700000000", `{"id":"evt_1"}`
	byOld := []string{"Stripe-Signature", "t=" + ts + ",v1=" + stripeSig("whsec_old_signing_secret_01", ts, body)}
	byNew := []string{"Stripe-Signature", "t=" + ts + ",v1=" + stripeSig("whsec_new_signing_secret_02", ts, body)}
	both := []string{"Stripe-Signature", "t=" + ts + ",v1=" + stripeSig("whsec_new_signing_secret_02", ts, body) + ",v1=" + stripeSig("whsec_old_signing_secret_01", ts, body)}

	rotating := newVerifier(t, flat(config.SchemeStripe, "{env.OLD}", "{env.NEW}"), e)
	check(t, rotating, []vector{
		{"old secret during the rotation", byOld, body, now, "stripe:default", ""},
		{"new secret during the rotation", byNew, body, now, "stripe:default", ""},
		{"both signatures", both, body, now, "stripe:default", ""},
	})
	rotated := newVerifier(t, flat(config.SchemeStripe, "{env.NEW}"), e)
	check(t, rotated, []vector{
		{"old secret once removed", byOld, body, now, "", Mismatch},
		{"new secret once the old is removed", byNew, body, now, "stripe:default", ""},
		{"both signatures once the old is removed", both, body, now, "stripe:default", ""},
	})
}

// TestTwoSenders: each sender's signature verifies as that sender, so
// their event ids are scoped apart; a third secret verifies as neither.
func TestTwoSenders(t *testing.T) {
	e := env{"{env.A1}": "secret-of-acme-a-1", "{env.A2}": "secret-of-acme-a-2", "{file./run/b}": "secret-of-beta-b-1"}
	rule := config.SignatureRule{Scheme: config.SchemeGitHub, Senders: []config.SignatureSender{
		{Name: "acme", Secrets: []string{"{env.A1}", "{env.A2}"}},
		{Name: "beta", Secrets: []string{"{file./run/b}"}},
	}}
	v := newVerifier(t, rule, e)
	body := `{"action":"opened"}`
	sig := func(secret string) []string {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(body))
		return []string{"X-Hub-Signature-256", "sha256=" + hex.EncodeToString(mac.Sum(nil))}
	}
	check(t, v, []vector{
		{"acme's first secret", sig("secret-of-acme-a-1"), body, time.Time{}, "github:acme", ""},
		{"acme's second secret", sig("secret-of-acme-a-2"), body, time.Time{}, "github:acme", ""},
		{"beta's secret", sig("secret-of-beta-b-1"), body, time.Time{}, "github:beta", ""},
		{"nobody's secret", sig("secret-c"), body, time.Time{}, "", Mismatch},
	})
}

// TestNewSkipsEmptySecrets: a rotation's other secret that is not set
// (an environment variable defined for the next rotation only) is left
// out; the sender's other secrets verify.
func TestNewSkipsEmptySecrets(t *testing.T) {
	v, err := New(flat(config.SchemeGitHub, "{env.NEXT}", "{env.A}"), env{"{env.NEXT}": "", "{env.A}": "It's a Secret to Everybody"}.resolve)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	if sender, reason, ok := v.CheckSignature(h, []byte("Hello, World!"), time.Now()); !ok {
		t.Fatalf("the set secret does not verify: %q %q", sender, reason)
	}
	if n := len(v.senders[0].keys); n != 1 {
		t.Fatalf("%d keys, want 1 (the empty secret left out)", n)
	}
}

// TestNewErrors: a secret that cannot be had or is not the scheme's is a
// provisioning error naming the sender and the placeholder, never the
// secret's value.
func TestNewErrors(t *testing.T) {
	const value = "not base64 at all!"
	for _, tt := range []struct {
		name string
		rule config.SignatureRule
		e    env
		want string
	}{
		{"unresolvable", flat(config.SchemeGitHub, "{env.NOPE}"), env{},
			"signature: sender default, secret 0 ({env.NOPE}): unrecognized placeholder {env.NOPE}"},
		{"every secret empty", flat(config.SchemeStripe, "{env.EMPTY}", "{env.UNSET}"), env{"{env.EMPTY}": "", "{env.UNSET}": ""},
			"signature: sender default has no secret: each of {env.EMPTY}, {env.UNSET} is empty once filled in (is the environment variable set, the file readable?)"},
		{"not a Standard Webhooks secret", flat(config.SchemeStandardWebhooks, "{env.SW}"), env{"{env.SW}": value},
			"signature: sender default, secret 0 ({env.SW}): is not a Standard Webhooks secret: want whsec_ and base64"},
		{"an empty Standard Webhooks secret", flat(config.SchemeStandardWebhooks, "{env.SW}"), env{"{env.SW}": "whsec_"},
			"signature: sender default, secret 0 ({env.SW}): is an empty Standard Webhooks secret"},
		{"no sender", config.SignatureRule{Scheme: config.SchemeGitHub}, env{},
			"signature: no sender has a secret"},
		{"timed without tolerance", config.SignatureRule{Scheme: config.SchemeStripe, Senders: []config.SignatureSender{{Name: "a", Secrets: []string{"{env.A}"}}}}, env{"{env.A}": "a"},
			"signature: the stripe scheme signs a timestamp and needs a positive tolerance"},
		{"unknown scheme", config.SignatureRule{Scheme: "paypal"}, env{},
			`signature: unknown scheme "paypal"`},
	} {
		_, err := New(tt.rule, tt.e.resolve)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: err = %v, want %s", tt.name, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), value) {
			t.Errorf("%s: the error shows the secret", tt.name)
		}
	}
}
