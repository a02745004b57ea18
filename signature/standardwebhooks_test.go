package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
)

// The Standard Webhooks libraries' published vector (TestWebhookSign in
// the reference libraries): this secret, message id, timestamp and body
// give this signature.
const (
	swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swMsgID  = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTime   = "1614265330"
	swBody   = `{"test": 2432232314}`
	swSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestStandardWebhooks(t *testing.T) {
	e := env{"{env.SW}": swSecret, "{env.SW_BARE}": strings.TrimPrefix(swSecret, "whsec_"), "{env.SW_NEW}": "whsec_" + base64.StdEncoding.EncodeToString([]byte("a newer secret of 24 byte"))}
	now := time.Unix(1614265330, 0)
	req := func(sig string, drop ...string) []string {
		h := []string{"webhook-id", swMsgID, "webhook-timestamp", swTime, "webhook-signature", sig}
		for _, d := range drop {
			for i := 0; i < len(h); i += 2 {
				if h[i] == d {
					h = append(h[:i], h[i+2:]...)
				}
			}
		}
		return h
	}
	newSig := func() string { // the same message signed with the newer secret
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(e["{env.SW_NEW}"], "whsec_"))
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(swMsgID + "." + swTime + "." + swBody))
		return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}()
	other := "v1," + base64.StdEncoding.EncodeToString(make([]byte, 32))
	tests := []vector{
		{"published vector", req(swSig), swBody, now, "standard-webhooks:default", ""},
		{"among other versions and signatures", req("v1a,bm90IGEga2V5 " + other + "  " + swSig + " v2,abc"), swBody, now, "standard-webhooks:default", ""},
		{"signed with the newer secret, old and new listed", req(newSig + " " + swSig), swBody, now, "standard-webhooks:default", ""},
		{"tampered body", req(swSig), `{"test": 2432232315}`, now, "", Mismatch},
		{"tampered id", append(req(swSig, "webhook-id"), "webhook-id", "msg_other"), swBody, now, "", Mismatch},
		{"tampered signature", req(other), swBody, now, "", Mismatch},
		{"expired", req(swSig), swBody, now.Add(5*time.Minute + time.Second), "", Timestamp},
		{"from the future", req(swSig), swBody, now.Add(-5*time.Minute - time.Second), "", Timestamp},
		{"no timestamp", req(swSig, "webhook-timestamp"), swBody, now, "", Timestamp},
		{"no signature", req(swSig, "webhook-signature"), swBody, now, "", Missing},
		{"no id", req(swSig, "webhook-id"), swBody, now, "", Malformed},
		{"timestamp in milliseconds is far in the future", append(req(swSig, "webhook-timestamp"), "webhook-timestamp", swTime+"000"), swBody, now, "", Timestamp},
		{"timestamp not a number", append(req(swSig, "webhook-timestamp"), "webhook-timestamp", "2021-02-25"), swBody, now, "", Malformed},
		{"only v1a", req("v1a,bm90IGEga2V5"), swBody, now, "", Malformed},
		{"v1 not base64", req("v1,!!!"), swBody, now, "", Malformed},
		{"v1 without a comma", req("v1" + strings.TrimPrefix(swSig, "v1,")), swBody, now, "", Malformed},
		{"signature header twice", append(req(swSig), "webhook-signature", swSig), swBody, now, "", Malformed},
		{"oversized signature header", req(swSig + " " + strings.Repeat("a", MaxHeaderLen)), swBody, now, "", Malformed},
		{"oversized id", append(req(swSig, "webhook-id"), "webhook-id", strings.Repeat("m", MaxHeaderLen+1)), swBody, now, "", Malformed},
		{"too many signatures", req(strings.Repeat(other+" ", MaxSignatures) + swSig), swBody, now, "", Malformed},
	}
	for _, secrets := range [][]string{{"{env.SW}"}, {"{env.SW_BARE}"}} {
		v := newVerifier(t, flat(config.SchemeStandardWebhooks, secrets...), e)
		for _, tt := range tests {
			if tt.name == "signed with the newer secret, old and new listed" {
				continue
			}
			check(t, v, []vector{tt})
		}
	}
	v := newVerifier(t, flat(config.SchemeStandardWebhooks, "{env.SW_NEW}", "{env.SW}"), e)
	for _, tt := range tests {
		check(t, v, []vector{tt})
	}
	onlyNew := newVerifier(t, flat(config.SchemeStandardWebhooks, "{env.SW_NEW}"), e)
	check(t, onlyNew, []vector{
		{"the old signature alone, once the old secret is removed", req(swSig), swBody, now, "", Mismatch},
		{"the new signature", req(newSig), swBody, now, "standard-webhooks:default", ""},
	})
}
