package e2e

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Senders by name: a route per sender preset, each giving only its
// secret. The deliveries are signed here from each sender's published
// definition, not by the gateway's code.

// senderCase is one sender: its route's path, its secret, an event of
// id as it sends it, and the headers of that event signed with secret at
// now.
type senderCase struct {
	name, path, secret string
	// query is the request's query string ("" none).
	query string
	body  func(id string) []byte
	sign  func(secret, id string, body []byte, now int64) []string
	// captured: the key is outside what is signed, so a captured
	// delivery re-sent under a new id verifies; it must be held.
	captured bool
}

// publicBase is the URL the senders that sign the URL were given.
const publicBase = "https://hooks.example.com"

func mac256(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// twilioSign is Twilio's signature of a form body posted to u.
func twilioSign(secret, u string, body []byte) string {
	form, _ := url.ParseQuery(string(body))
	names := make([]string, 0, len(form))
	for k := range form {
		names = append(names, k)
	}
	sort.Strings(names)
	data := u
	for _, k := range names {
		vals := append([]string(nil), form[k]...)
		sort.Strings(vals)
		for _, v := range vals {
			data += k + v
		}
	}
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(data))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

var senderCases = []senderCase{
	{name: "stripe", path: "/webhooks/stripe", secret: "whsec_e2eStripeEndpointSecret0123",
		body: func(id string) []byte {
			return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"payment_intent.succeeded","data":{"object":{"amount":4200}}}`, id)
		},
		sign: func(secret, _ string, body []byte, now int64) []string {
			ts := strconv.FormatInt(now, 10)
			return []string{"Content-Type", "application/json", "Stripe-Signature", "t=" + ts + ",v1=" + hex.EncodeToString(mac256([]byte(secret), append([]byte(ts+"."), body...)))}
		}},
	{name: "github", path: "/webhooks/github", secret: "an e2e GitHub webhook secret", captured: true,
		body: func(string) []byte {
			return []byte(`{"action":"opened","number":7,"repository":{"full_name":"acme/app"}}`)
		},
		sign: func(secret, id string, body []byte, _ int64) []string {
			return []string{"Content-Type", "application/json", "X-GitHub-Event", "pull_request", "X-GitHub-Delivery", id,
				"X-Hub-Signature-256", "sha256=" + hex.EncodeToString(mac256([]byte(secret), body))}
		}},
	{name: "shopify", path: "/webhooks/shopify", secret: "shpss_e2e0123456789abcdef01234567", captured: true,
		body: func(string) []byte {
			return []byte(`{"id":820982911946154508,"email":"jon@example.com","total_price":"42.00"}`)
		},
		sign: func(secret, id string, body []byte, _ int64) []string {
			return []string{"Content-Type", "application/json", "X-Shopify-Topic", "orders/create", "X-Shopify-Event-Id", id,
				"X-Shopify-Webhook-Id", "wh-" + id, "X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac256([]byte(secret), body))}
		}},
	{name: "slack", path: "/webhooks/slack", secret: "8f742231b10e8888abcd99e2ezzz85a5",
		body: func(id string) []byte {
			return fmt.Appendf(nil, `{"type":"event_callback","event_id":%q,"event":{"type":"app_mention","text":"hi"}}`, id)
		},
		sign: func(secret, _ string, body []byte, now int64) []string {
			ts := strconv.FormatInt(now, 10)
			return []string{"Content-Type", "application/json", "X-Slack-Request-Timestamp", ts,
				"X-Slack-Signature", "v0=" + hex.EncodeToString(mac256([]byte(secret), append([]byte("v0:"+ts+":"), body...)))}
		}},
	{name: "twilio", path: "/webhooks/twilio", query: "tenant=acme", secret: "0123456789abcdef0123456789e2e2e2", captured: true,
		body: func(string) []byte {
			return []byte("MessageSid=SM0123456789abcdef&AccountSid=AC01&From=%2B15005550006&Body=Hello+%26+welcome&MessageStatus=received")
		},
		sign: func(secret, id string, body []byte, _ int64) []string {
			u := publicBase + "/webhooks/twilio?tenant=acme"
			return []string{"Content-Type", "application/x-www-form-urlencoded", "I-Twilio-Idempotency-Token", id,
				"X-Forwarded-Proto", "https", "X-Forwarded-Host", "hooks.example.com", "X-Twilio-Signature", twilioSign(secret, u, body)}
		}},
	{name: "paddle", path: "/webhooks/paddle", secret: "pdl_ntfset_01e2e_e2ePaddleSecretKey0123",
		body: func(id string) []byte {
			return fmt.Appendf(nil, `{"event_id":%q,"event_type":"transaction.completed","data":{"id":"txn_01","total":"4200"}}`, id)
		},
		sign: func(secret, _ string, body []byte, now int64) []string {
			ts := strconv.FormatInt(now, 10)
			return []string{"Content-Type", "application/json", "Paddle-Signature", "ts=" + ts + ";h1=" + hex.EncodeToString(mac256([]byte(secret), append([]byte(ts+":"), body...)))}
		}},
	{name: "square", path: "/webhooks/square", secret: "e2eSquareSignatureKey0123",
		body: func(id string) []byte {
			return fmt.Appendf(nil, `{"merchant_id":"ML1","type":"payment.updated","event_id":%q,"data":{"id":"pay_1"}}`, id)
		},
		sign: func(secret, _ string, body []byte, _ int64) []string {
			msg := append([]byte(publicBase+"/webhooks/square"), body...)
			return []string{"Content-Type", "application/json", "X-Square-Hmacsha256-Signature", base64.StdEncoding.EncodeToString(mac256([]byte(secret), msg))}
		}},
	{name: "standard-webhooks", path: "/webhooks/standard", secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("an e2e Standard Webhooks secret!")),
		body: func(string) []byte { return []byte(`{"type":"invoice.paid","data":{"invoice":"in_7"}}`) },
		sign: func(secret, id string, body []byte, now int64) []string {
			return []string{"Content-Type", "application/json", "webhook-id", id, "webhook-timestamp", strconv.FormatInt(now, 10),
				"webhook-signature", standardSignature(secret, id, now, body)}
		}},
	{name: "svix", path: "/webhooks/svix", secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("an e2e Svix signing secret, 32 b")),
		body: func(string) []byte { return []byte(`{"type":"user.created","data":{"id":"user_1"}}`) },
		sign: func(secret, id string, body []byte, now int64) []string {
			return []string{"Content-Type", "application/json", "webhook-id", id, "webhook-timestamp", strconv.FormatInt(now, 10),
				"webhook-signature", standardSignature(secret, id, now, body)}
		}},
}

// senderRoutes is a routes.yaml with one route per sender, each naming
// its sender and giving its secret; square's names its public URL,
// twilio's is rebuilt from the trusted proxy's X-Forwarded-* headers.
func senderRoutes() (rules string, env []string) {
	var b strings.Builder
	b.WriteString("routes:\n")
	for _, c := range senderCases {
		v := "SECRET_" + strings.ToUpper(strings.ReplaceAll(c.name, "-", "_"))
		fmt.Fprintf(&b, "  - name: %s\n    match: { path: %s }\n    sender: %s\n    signature:\n      secrets: [\"{env.%s}\"]\n", c.name, c.path, c.name, v)
		if c.name == "square" {
			fmt.Fprintf(&b, "      url: %s%s\n", publicBase, c.path)
		}
		env = append(env, v+"="+c.secret)
	}
	// An hmac route keyed by a header its signature does not cover: a
	// warning at load.
	b.WriteString("  - name: relay\n    match: { path: /webhooks/relay }\n    key: [\"{header.X-Relay-Id}\"]\n" +
		"    signature: { scheme: hmac, secrets: [\"{env.SECRET_RELAY}\"], header: X-Relay-Signature }\n")
	env = append(env, "SECRET_RELAY=an e2e relay secret, 32 bytes long")
	return b.String(), env
}

// TestWebhookSenders: for every sender preset, on every store, the
// genuine event delivered three times (re-signed with a fresh timestamp
// where the sender signs one) executes once and is replayed twice; a
// forged one gets 401 signature-invalid and is not forwarded; and where
// the key is outside the signature (github, shopify, twilio) a captured
// delivery re-sent under a new id is held, not executed. What each
// route resolved to is logged at load, and a signed route keyed by
// something its signature does not cover is a warning.
func TestWebhookSenders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		t.Parallel()
		up := newUpstream(t)
		rules, env := senderRoutes()
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: rules, env: env,
			global: "servers {\n\t\ttrusted_proxies static 127.0.0.1/32\n\t}"})
		logs := gw.logs.String()
		for _, want := range []string{`"route":"github"`, `"on_same_payload":"hold"`, `"signed_url":"` + publicBase + `/webhooks/square"`,
			`route \"relay\" is keyed by the header X-Relay-Id ({header.X-Relay-Id}), which its hmac signature does not cover`} {
			if !strings.Contains(logs, want) {
				t.Errorf("the load's log of the signed routes has no %s:\n%s", want, logs)
			}
		}
		for _, c := range senderCases {
			target := gw.url + c.path
			if c.query != "" {
				target += "?" + c.query
			}
			const id = "evt_e2e_1"
			body := c.body(id)
			for i := range 3 {
				r := send(t, "POST", target, body, c.sign(c.secret, id, body, time.Now().Unix())...)
				replayed := r.header.Get("Idempotent-Replayed") == "true"
				if r.status != http.StatusCreated || replayed != (i > 0) {
					t.Fatalf("%s, delivery %d: %d (replayed %v) %s; want 201, replayed from the second", c.name, i+1, r.status, replayed, r.body)
				}
			}
			if n := up.count(c.path); n != 1 {
				t.Errorf("%s: the event executed %d times, want 1", c.name, n)
			}

			forgedSecret := c.secret[:len(c.secret)-4] + "f0rg"
			if strings.HasPrefix(c.secret, "whsec_") {
				forgedSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("somebody else's secret, 32 byte"))
			}
			forged := c.body("evt_e2e_forged")
			r := send(t, "POST", target, forged, c.sign(forgedSecret, "evt_e2e_forged", forged, time.Now().Unix())...)
			if !isProblem(t, r, http.StatusUnauthorized, "signature-invalid", "") {
				t.Errorf("%s: a forged delivery: %d %s, want 401 signature-invalid", c.name, r.status, r.body)
			}
			if n := up.count(c.path); n != 1 {
				t.Errorf("%s: %d executions after the forged delivery, want 1", c.name, n)
			}

			if !c.captured {
				continue
			}
			r = send(t, "POST", target, body, c.sign(c.secret, "evt_e2e_captured", body, time.Now().Unix())...)
			if !isProblem(t, r, http.StatusConflict, "same-payload", "") {
				t.Errorf("%s: a captured delivery under a new id: %d %s, want 409 same-payload (held)", c.name, r.status, r.body)
			}
			if n := up.count(c.path); n != 1 {
				t.Errorf("%s: a captured delivery under a new id executed: %d executions, want 1", c.name, n)
			}
		}
	})
}
