package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/signature/senders"
)

// presetRoute is a route that names sender and gives only its secrets,
// with extra lines of its own.
func presetRoute(sender, extra string) string {
	return "routes:\n  - name: hook\n    match: { path: /hook }\n    sender: " + sender +
		"\n    signature:\n      secrets: [\"{env.SECRET}\"]\n" + extra
}

// TestSenderPresets: a route that names its sender and gives its
// secrets gets the sender's scheme, key, tolerance, a ttl that covers
// its retry window, and, where its key is not signed, the same payload
// under a new key held for the ttl.
func TestSenderPresets(t *testing.T) {
	for _, tt := range []struct {
		sender    string
		scheme    SignatureScheme
		key       []string
		tolerance time.Duration
		ttl       time.Duration
		same      time.Duration
		onSame    OnSamePayload
	}{
		{"stripe", SchemeStripe, []string{"{body.id}"}, 5 * time.Minute, 72 * time.Hour, 0, OnSamePayloadWarn},
		{"github", SchemeGitHub, []string{"{header.X-GitHub-Delivery}"}, 0, 72 * time.Hour, 72 * time.Hour, OnSamePayloadHold},
		{"shopify", SchemeShopify, []string{"{header.X-Shopify-Event-Id}", "{header.X-Shopify-Webhook-Id}"}, 0, 24 * time.Hour, 24 * time.Hour, OnSamePayloadHold},
		{"slack", SchemeSlack, []string{"{body.event_id}"}, 5 * time.Minute, 24 * time.Hour, 0, OnSamePayloadWarn},
		{"twilio", SchemeTwilio, []string{"{header.I-Twilio-Idempotency-Token}"}, 0, 24 * time.Hour, 24 * time.Hour, OnSamePayloadHold},
		{"paddle", SchemePaddle, []string{"{body.event_id}"}, 5 * time.Second, 72 * time.Hour, 0, OnSamePayloadWarn},
		{"square", SchemeSquare, []string{"{body.event_id}"}, 0, 72 * time.Hour, 0, OnSamePayloadWarn},
		{"standard-webhooks", SchemeStandardWebhooks, []string{"{header.webhook-id}"}, 5 * time.Minute, 75*time.Hour + 35*time.Minute + 5*time.Second, 0, OnSamePayloadWarn},
		{"svix", SchemeStandardWebhooks, []string{"{header.webhook-id}"}, 5 * time.Minute, 27*time.Hour + 35*time.Minute + 5*time.Second, 0, OnSamePayloadWarn},
	} {
		r, err := Parse("r.yaml", []byte(presetRoute(tt.sender, "")), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", tt.sender, err)
		}
		if w := r.Warnings(); w != nil {
			t.Errorf("%s: warnings: %v", tt.sender, w)
		}
		res, err := r.Resolve(Limits{})
		if err != nil {
			t.Fatal(err)
		}
		g := res[0]
		if g.Signature.Scheme != tt.scheme || !reflect.DeepEqual(g.Key, templates(tt.key...)) || g.Signature.Tolerance != tt.tolerance ||
			g.TTL != tt.ttl || g.SamePayloadWindow != tt.same || g.OnSamePayload != tt.onSame || !g.ScopeSender || g.Sender != tt.sender {
			t.Errorf("%s: scheme %s key %v tolerance %v ttl %v same %v %s scopeSender %v sender %q; want %s %v %v %v %v %s",
				tt.sender, g.Signature.Scheme, g.Key, g.Signature.Tolerance, g.TTL, g.SamePayloadWindow, g.OnSamePayload, g.ScopeSender, g.Sender,
				tt.scheme, tt.key, tt.tolerance, tt.ttl, tt.same, tt.onSame)
		}
	}
	if n := len(senders.All()); n != 9 {
		t.Errorf("%d presets, want 9", n)
	}
}

// TestSenderPresetRouteWins: what the route sets itself wins over its
// sender's preset: scheme, key, tolerance, ttl (with the window's
// warning), the same-payload rule.
func TestSenderPresetRouteWins(t *testing.T) {
	r, err := Parse("r.yaml", []byte(presetRoute("github", `      tolerance: 1m
      scheme: hmac
      header: X-Hub-Signature-256
      prefix: "sha256="
      signed: "{timestamp}.{body}"
      timestamp_header: X-Hook-Time
    key: ["{body.hook_id}"]
    ttl: 1h
    same_payload_window: 10m
    on_same_payload: reject
`)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	g := res[0]
	if g.Signature.Scheme != SchemeHMAC || g.Signature.Tolerance != time.Minute || !reflect.DeepEqual(g.Key, templates("{body.hook_id}")) ||
		g.TTL != time.Hour || g.SamePayloadWindow != 10*time.Minute || g.OnSamePayload != OnSamePayloadReject {
		t.Errorf("got scheme %s tolerance %v key %v ttl %v same %v %s", g.Signature.Scheme, g.Signature.Tolerance, g.Key, g.TTL, g.SamePayloadWindow, g.OnSamePayload)
	}
	if w := r.Warnings().Error(); !strings.Contains(w, "r.yaml:14: routes[0].ttl: routes[0]'s ttl 1h0m0s is shorter than github's retry window") {
		t.Errorf("warnings: %s", w)
	}

	// The defaults' ttl is raised to the window; a longer one stays.
	for _, tt := range []struct {
		defaults string
		want     time.Duration
	}{{"2h", 4 * time.Hour}, {"100h", 100 * time.Hour}} {
		r, err := Parse("r.yaml", []byte("defaults:\n  ttl: "+tt.defaults+"\n"+presetRoute("shopify", "")), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		res, _ := r.Resolve(Limits{})
		if res[0].TTL != tt.want || res[0].SamePayloadWindow != tt.want {
			t.Errorf("defaults.ttl %s: ttl %v, same_payload_window %v; want %v", tt.defaults, res[0].TTL, res[0].SamePayloadWindow, tt.want)
		}
	}
}

// TestCapturedDeliveryWarning: a signed route keyed by something its
// signature does not cover is a warning naming the route and the
// template, unless the same payload under a new key is held or refused;
// a key its signature covers is not.
func TestCapturedDeliveryWarning(t *testing.T) {
	const head = "routes:\n  - name: hook\n    match: { path: /hook }\n"
	hmac := "    signature: { scheme: hmac, secrets: [\"{env.S}\"], header: X-Sig }\n"
	for _, tt := range []struct{ name, yaml, want string }{
		{"hmac keyed by an unsigned header", head + "    key: [\"{header.X-Delivery}\"]\n" + hmac,
			`r.yaml:4: routes[0].key: route "hook" is keyed by the header X-Delivery ({header.X-Delivery}), which its hmac signature does not cover: a captured delivery sent again under a new id verifies and executes again; set same_payload_window (e.g. 24h0m0s) with on_same_payload: hold, or key by something signed`},
		{"github keyed by its delivery id, the scheme alone", head + "    key: [\"{header.X-GitHub-Delivery}\"]\n    ttl: 72h\n    signature: { scheme: github, secrets: [\"{env.S}\"] }\n",
			`r.yaml:4: routes[0].key: route "hook" is keyed by the header X-Github-Delivery ({header.X-GitHub-Delivery}), which its github signature does not cover: a captured delivery sent again under a new id verifies and executes again; set same_payload_window (e.g. 72h0m0s) with on_same_payload: hold, or key by something signed`},
		{"a query on a body-only scheme", head + "    key: [\"{query.id}\"]\n" + hmac,
			`r.yaml:4: routes[0].key: route "hook" is keyed by the query id ({query.id}), which its hmac signature does not cover: a captured delivery sent again under a new id verifies and executes again; set same_payload_window (e.g. 24h0m0s) with on_same_payload: hold, or key by something signed`},
		{"the preset's unsigned key, the route's warn", presetRoute("github", "    same_payload_window: 1h\n    on_same_payload: warn\n"),
			`r.yaml:4: routes[0].sender: route "hook" is keyed by the header X-Github-Delivery ({header.X-GitHub-Delivery}), which its github signature does not cover: a captured delivery sent again under a new id verifies and executes again; set same_payload_window (e.g. 72h0m0s) with on_same_payload: hold, or key by something signed`},
		{"a body key", head + "    key: [\"{body.id}\"]\n" + hmac, ""},
		{"the signed timestamp header", head + "    key: [\"{header.X-Time}\"]\n    signature: { scheme: hmac, secrets: [\"{env.S}\"], header: X-Sig, signed: \"{timestamp}{body}\", timestamp_header: x-time }\n", ""},
		{"webhook-id", presetRoute("standard-webhooks", ""), ""},
		{"a query on twilio", head + "    key: [\"{query.id}\"]\n    sender: twilio\n    signature: { secrets: [\"{env.S}\"] }\n", ""},
		{"held", head + "    key: [\"{header.X-Delivery}\"]\n" + hmac + "    same_payload_window: 1h\n    on_same_payload: hold\n", ""},
	} {
		r, err := Parse("r.yaml", []byte(tt.yaml), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := r.Warnings().Error(); got != tt.want {
			t.Errorf("%s: warnings\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// TestSignatureURL: url is for the schemes that sign the URL, written as
// the sender has it.
func TestSignatureURL(t *testing.T) {
	for _, tt := range []struct{ sender, url, want string }{
		{"twilio", "https://hooks.example.com/twilio", ""},
		{"square", "http://127.0.0.1:8080/sq", ""},
		{"square", "https://hooks.example.com/sq?x=1", `r.yaml:7: routes[0].signature.url: "https://hooks.example.com/sq?x=1" is not the URL the sender posts to: write it as configured at the sender, http(s)://host[:port]/path, without query, fragment or user`},
		{"twilio", "/twilio", `r.yaml:7: routes[0].signature.url: "/twilio" is not the URL the sender posts to: write it as configured at the sender, http(s)://host[:port]/path, without query, fragment or user`},
		{"stripe", "https://hooks.example.com/stripe", `r.yaml:7: routes[0].signature.url: is set, but the stripe scheme signs no URL (only twilio and square do)`},
	} {
		_, err := Parse("r.yaml", []byte(presetRoute(tt.sender, "      url: \""+tt.url+"\"\n")), Limits{})
		if got := errText(err); got != tt.want {
			t.Errorf("%s %s:\n got %s\nwant %s", tt.sender, tt.url, got, tt.want)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
