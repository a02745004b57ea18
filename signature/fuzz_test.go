package signature

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
)

// FuzzHeaders gives every scheme's header parser arbitrary header values
// and bodies: none may panic, a refusal always has one of the Reasons,
// and an acceptance names the sender. The seeds are the published
// vectors and their broken forms; `go test` runs them, `go test -fuzz
// FuzzHeaders` explores.
func FuzzHeaders(f *testing.F) {
	f.Add("t=1700000000,v1="+stripeV1, "", "", stripeBody, int64(1700000000))
	f.Add("t=1700000000,,v1=,=,t=", "", "", "", int64(0))
	f.Add(swSig, swMsgID, swTime, swBody, int64(1614265330))
	f.Add("v1, v1,, ,v1a", "", "-1", "", int64(-1))
	f.Add(githubSig, "", "", githubBody, int64(0))
	f.Add("sha256=", "", "", "", int64(0))
	f.Add(slackSig, "", slackTime, slackBody, int64(1531420618))
	f.Add("v0=zz", "", "99999999999999999999", "", int64(1<<62))
	f.Add("ts=1;h1=00;h1=", "bodySHA256=ab", "", "a=1&a=1&b=%zz", int64(1))
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAA=", "x=%", "", "=&&=", int64(0))

	e := env{"{env.STRIPE}": stripeSecret, "{env.SW}": swSecret, "{env.GH}": githubSecret, "{env.SLACK}": slackSecret}
	sender := func(s string) []config.SignatureSender {
		return []config.SignatureSender{{Name: "default", Secrets: []string{s}}}
	}
	rules := []config.SignatureRule{
		{Scheme: config.SchemeStripe, Tolerance: 5 * time.Minute, Senders: sender("{env.STRIPE}")},
		{Scheme: config.SchemeStandardWebhooks, Tolerance: 5 * time.Minute, Senders: sender("{env.SW}")},
		{Scheme: config.SchemeGitHub, Senders: sender("{env.GH}")},
		{Scheme: config.SchemeHMAC, Tolerance: 5 * time.Minute, Senders: sender("{env.SLACK}"), Header: "X-Slack-Signature",
			Algorithm: "sha256", Encoding: "hex", Prefix: "v0=", Signed: "v0:{timestamp}:{body}", TimestampHeader: "X-Slack-Request-Timestamp"},
		{Scheme: config.SchemeHMAC, Senders: sender("{env.SLACK}"), Header: "X-Slack-Signature",
			Algorithm: "sha512", Encoding: "base64", Signed: "{body}"},
		{Scheme: config.SchemeShopify, Senders: sender("{env.GH}")},
		{Scheme: config.SchemeSlack, Tolerance: 5 * time.Minute, Senders: sender("{env.SLACK}")},
		{Scheme: config.SchemeTwilio, Senders: sender("{env.GH}")},
		{Scheme: config.SchemePaddle, Tolerance: 5 * time.Second, Senders: sender("{env.GH}")},
		{Scheme: config.SchemeSquare, Senders: sender("{env.GH}")},
	}
	verifiers := make([]*Verifier, len(rules))
	for i, r := range rules {
		v, err := New(r, e.resolve)
		if err != nil {
			f.Fatal(err)
		}
		verifiers[i] = v
	}
	f.Fuzz(func(t *testing.T, sig, id, ts, body string, now int64) {
		h := http.Header{}
		for _, name := range []string{"Stripe-Signature", "Webhook-Signature", "X-Hub-Signature-256", "X-Slack-Signature",
			"X-Shopify-Hmac-Sha256", "X-Twilio-Signature", "Paddle-Signature", "X-Square-Hmacsha256-Signature"} {
			h.Set(name, sig)
		}
		h.Set("Webhook-Id", id)
		h.Set("Webhook-Timestamp", ts)
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("Content-Type", "application/x-www-form-urlencoded")
		for i, v := range verifiers {
			sender, reason, ok := v.CheckSignatureURL(h, "https://hooks.example.com:443/t?"+id, []byte(body), time.Unix(now, 0))
			switch {
			case ok && (sender == "" || reason != ""):
				t.Errorf("rule %d: accepted with sender %q and reason %q", i, sender, reason)
			case !ok && (sender != "" || !slices.Contains(Reasons, reason)):
				t.Errorf("rule %d: refused with sender %q and reason %q", i, sender, reason)
			}
		}
	})
}
