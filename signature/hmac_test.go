package signature

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
)

// Slack's published example ("Verifying requests from Slack"): an hmac
// route with header X-Slack-Signature, prefix "v0=", signed
// "v0:{timestamp}:{body}" and timestamp_header X-Slack-Request-Timestamp.
const (
	slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	slackTime   = "1531420618"
	slackBody   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	slackSig    = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
)

func TestHMACTimestamped(t *testing.T) {
	rule := config.SignatureRule{Scheme: config.SchemeHMAC, Tolerance: 5 * time.Minute,
		Senders: []config.SignatureSender{{Name: "slack", Secrets: []string{"{env.SLACK}"}}},
		Header:  "X-Slack-Signature", Algorithm: "sha256", Encoding: "hex", Prefix: "v0=",
		Signed: "v0:{timestamp}:{body}", TimestampHeader: "X-Slack-Request-Timestamp"}
	v := newVerifier(t, rule, env{"{env.SLACK}": slackSecret})
	now := time.Unix(1531420618, 0)
	req := func(sig, ts string) []string {
		h := []string{"X-Slack-Signature", sig}
		if ts != "" {
			h = append(h, "X-Slack-Request-Timestamp", ts)
		}
		return h
	}
	check(t, v, []vector{
		{"published example", req(slackSig, slackTime), slackBody, now, "hmac:slack", ""},
		{"tampered body", req(slackSig, slackTime), slackBody + "&x=1", now, "", Mismatch},
		{"tampered timestamp", req(slackSig, "1531420619"), slackBody, now, "", Mismatch},
		{"tampered signature", req("v0="+strings.Repeat("1", 64), slackTime), slackBody, now, "", Mismatch},
		{"expired", req(slackSig, slackTime), slackBody, now.Add(time.Hour), "", Timestamp},
		{"from the future", req(slackSig, slackTime), slackBody, now.Add(-time.Hour), "", Timestamp},
		{"no timestamp", req(slackSig, ""), slackBody, now, "", Timestamp},
		{"timestamp not a number", req(slackSig, "yesterday"), slackBody, now, "", Malformed},
		{"timestamp header twice", append(req(slackSig, slackTime), "X-Slack-Request-Timestamp", slackTime), slackBody, now, "", Malformed},
		{"no signature", req("", slackTime)[2:], slackBody, now, "", Missing},
		{"no prefix", req(strings.TrimPrefix(slackSig, "v0="), slackTime), slackBody, now, "", Malformed},
		{"oversized header", req(slackSig+strings.Repeat("0", MaxHeaderLen), slackTime), slackBody, now, "", Malformed},
	})
}

// TestHMACBodyBase64: the body alone, SHA-512, base64 with or without
// its padding, no prefix (as Shopify's X-Shopify-Hmac-Sha256 is, with
// SHA-256), and no timestamp: any time verifies.
func TestHMACBodyBase64(t *testing.T) {
	rule := config.SignatureRule{Scheme: config.SchemeHMAC,
		Senders: []config.SignatureSender{{Name: "default", Secrets: []string{"{env.K}"}}},
		Header:  "X-Signature", Algorithm: "sha512", Encoding: "base64", Signed: "{body}"}
	v := newVerifier(t, rule, env{"{env.K}": "shop secret 0123456"})
	body := `{"id":820982911946154508}`
	mac := hmac.New(sha512.New, []byte("shop secret 0123456"))
	mac.Write([]byte(body))
	sig := mac.Sum(nil)
	std, raw := base64.StdEncoding.EncodeToString(sig), base64.RawStdEncoding.EncodeToString(sig)
	short := base64.StdEncoding.EncodeToString(sig[:32])
	for _, tt := range []struct {
		name, sig, body string
		sender          string
		reason          Reason
	}{
		{"padded", std, body, "hmac:default", ""},
		{"unpadded", raw, body, "hmac:default", ""},
		{"tampered body", std, body + " ", "", Mismatch},
		{"a SHA-256 length", short, body, "", Malformed},
		{"hex, not base64", strings.Repeat("ab", 64), body, "", Malformed},
	} {
		check(t, v, []vector{{tt.name, []string{"X-Signature", tt.sig}, tt.body, time.Unix(0, 0), tt.sender, tt.reason}})
	}
}
