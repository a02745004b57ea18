package config

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// TestWebhookResolve: testdata/webhooks.yaml resolves each route's
// signature, scope, key, sender, statuses and retention, and the same
// after Caddy's JSON.
func TestWebhookResolve(t *testing.T) {
	r, err := Load("testdata/webhooks.yaml", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defaultStatuses := []int{401, 403, 405, 408, 413, 415, 425, 429, 431, 503} // the built-in ones but 404 (defaults.store_statuses)
	for _, tt := range []struct {
		got         Resolved
		sig         *SignatureRule
		key, scope  []keying.Template
		scopeSender bool
		sender      string
		window      time.Duration
		retry       []int
		tombstone   time.Duration
		after       AfterExpiry
		same        time.Duration
		onSame      OnSamePayload
	}{
		{res[0], &SignatureRule{Scheme: SchemeStripe, Tolerance: 10 * time.Minute,
			Senders: []SignatureSender{{"default", []string{"{env.STRIPE_WHSEC_OLD}", "{env.STRIPE_WHSEC}"}}}},
			templates("{body.id}"), nil, true, "stripe", 72 * time.Hour, defaultStatuses, 240 * time.Hour, AfterExpiryReject, 0, OnSamePayloadWarn},
		{res[1], &SignatureRule{Scheme: SchemeStandardWebhooks, Tolerance: 5 * time.Minute,
			Senders: []SignatureSender{{"clerk", []string{"{file./run/secrets/clerk}"}}, {"resend", []string{"{env.RESEND_WHSEC}"}}}},
			templates("{header.webhook-id}"), nil, true, "svix", 27*time.Hour + 35*time.Minute + 5*time.Second, defaultStatuses, 240 * time.Hour, AfterExpiryReject, time.Hour, OnSamePayloadHold},
		{res[2], &SignatureRule{Scheme: SchemeHMAC, Tolerance: 5 * time.Minute,
			Senders: []SignatureSender{{"default", []string{"{env.SLACK_SIGNING_SECRET}"}}},
			Header:  "X-Slack-Signature", Algorithm: "sha256", Encoding: "hex", Prefix: "v0=", Signed: "v0:{timestamp}:{body}", TimestampHeader: "X-Slack-Request-Timestamp"},
			templates("{form.trigger_id}"), templates("{form.team_id}"), false, "", 0, []int{404, 429, 503}, 0, AfterExpiryExecute, 0, OnSamePayloadWarn},
		{res[3], &SignatureRule{Scheme: SchemeHMAC,
			Senders: []SignatureSender{{"default", []string{"{env.SHOPIFY_SECRET}"}}},
			Header:  "X-Shopify-Hmac-Sha256", Algorithm: "sha256", Encoding: "base64", Signed: "{body}"},
			templates("{header.X-Shopify-Webhook-Id}"), nil, true, "shopify", 4 * time.Hour, defaultStatuses, 240 * time.Hour, AfterExpiryReject, 96 * time.Hour, OnSamePayloadHold},
	} {
		g := tt.got
		if !reflect.DeepEqual(g.Signature, tt.sig) || !reflect.DeepEqual(g.Key, tt.key) || !reflect.DeepEqual(g.Scope, tt.scope) ||
			g.ScopeSender != tt.scopeSender || g.Sender != tt.sender || g.SenderWindow != tt.window || !slices.Equal(g.RetryStatuses, tt.retry) ||
			g.TombstoneTTL != tt.tombstone || g.AfterExpiry != tt.after || g.SamePayloadWindow != tt.same || g.OnSamePayload != tt.onSame {
			t.Errorf("%s:\n got %+v %v %v scopeSender %v sender %q %v retry %v tombstone %v %s same %v %s\nwant %+v %v %v scopeSender %v sender %q %v retry %v tombstone %v %s same %v %s",
				g.Name, g.Signature, g.Key, g.Scope, g.ScopeSender, g.Sender, g.SenderWindow, g.RetryStatuses, g.TombstoneTTL, g.AfterExpiry, g.SamePayloadWindow, g.OnSamePayload,
				tt.sig, tt.key, tt.scope, tt.scopeSender, tt.sender, tt.window, tt.retry, tt.tombstone, tt.after, tt.same, tt.onSame)
		}
	}
	if got := res[2].Signature.SignedParts(); !slices.Equal(got, []string{"v0:", "{timestamp}", ":", "{body}"}) {
		t.Errorf("SignedParts = %q", got)
	}
	if id := res[1].Signature.Identity("clerk"); id != "standard-webhooks:clerk" {
		t.Errorf("Identity = %q", id)
	}
	again, b := jsonRoundTrip(t, r)
	if !equalResolved(again, res) {
		t.Errorf("JSON round trip differs: %s", b)
	}
	for _, want := range []string{`"signature":{"scheme":"stripe","secrets":["{env.STRIPE_WHSEC_OLD}","{env.STRIPE_WHSEC}"],"tolerance":"10m0s"}`,
		`"tombstone_ttl":"0s"`, `"store_statuses":[]`, `"senders":{"clerk":["{file./run/secrets/clerk}"],"resend":["{env.RESEND_WHSEC}"]}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
	// Every warning: stripe's 72h beside a 96h ttl is none; the others are
	// tested in TestWarnings.
	if w := r.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
}

// TestRetryStatusesDefault: a route that sets nothing releases the
// not-done statuses and stores 400 and 422.
func TestRetryStatusesDefault(t *testing.T) {
	res := resolveOne(t, "routes:\n"+route)
	want := []int{401, 403, 404, 405, 408, 413, 415, 425, 429, 431, 503}
	if !slices.Equal(res.RetryStatuses, want) {
		t.Errorf("RetryStatuses = %v, want %v", res.RetryStatuses, want)
	}
	for _, stored := range []int{400, 409, 410, 422} {
		if slices.Contains(res.RetryStatuses, stored) {
			t.Errorf("%d is released by default; it is a result", stored)
		}
	}
	for _, tt := range []struct{ name, yaml string }{
		{"route stores 404 and 401", "routes:\n" + route + "    store_statuses: [404, 401]\n"},
		{"defaults store 404 and 401", "defaults:\n  store_statuses: [401, 404]\nroutes:\n" + route},
		{"the route's retry list, the defaults' store list", "defaults:\n  store_statuses: [401, 404]\nroutes:\n" + route +
			"    retry_statuses: [401, 403, 404, 405, 408, 413, 415, 425, 429, 431, 503]\n"},
	} {
		got := resolveOne(t, tt.yaml).RetryStatuses
		if w := []int{403, 405, 408, 413, 415, 425, 429, 431, 503}; !slices.Equal(got, w) {
			t.Errorf("%s: RetryStatuses = %v, want %v", tt.name, got, w)
		}
	}
	if got := resolveOne(t, "defaults:\n  store_statuses: [404]\nroutes:\n"+route+"    store_statuses: []\n").RetryStatuses; !slices.Equal(got, want) {
		t.Errorf("an explicit store_statuses: [] on the route: RetryStatuses = %v, want %v", got, want)
	}
}

// TestRetention: tombstone_ttl, after_expiry, same_payload_window and
// on_same_payload, with their defaults and their explicit offs.
func TestRetention(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		tombstone  time.Duration
		after      AfterExpiry
		window     time.Duration
		on         OnSamePayload
	}{
		{"built-in", "routes:\n" + route, 720 * time.Hour, AfterExpiryExecute, 0, OnSamePayloadWarn},
		{"route", "routes:\n" + route + "    tombstone_ttl: 48h\n    after_expiry: reject\n    same_payload_window: 24h\n    on_same_payload: reject\n",
			48 * time.Hour, AfterExpiryReject, 24 * time.Hour, OnSamePayloadReject},
		{"defaults", "defaults:\n  tombstone_ttl: 1h\n  same_payload_window: 10m\n  on_same_payload: hold\nroutes:\n" + route,
			time.Hour, AfterExpiryExecute, 10 * time.Minute, OnSamePayloadHold},
		{"route turns the defaults off", "defaults:\n  tombstone_ttl: 1h\n  same_payload_window: 10m\nroutes:\n" + route + "    tombstone_ttl: 0s\n    same_payload_window: 0\n",
			0, AfterExpiryExecute, 0, OnSamePayloadWarn},
	} {
		res := resolveOne(t, tt.yaml)
		if res.TombstoneTTL != tt.tombstone || res.AfterExpiry != tt.after || res.SamePayloadWindow != tt.window || res.OnSamePayload != tt.on {
			t.Errorf("%s: %v %s %v %s", tt.name, res.TombstoneTTL, res.AfterExpiry, res.SamePayloadWindow, res.OnSamePayload)
		}
	}
}

// TestScopeUnderSignature: the verified sender is the scope unless the
// route sets scope itself; defaults.scope does not apply.
func TestScopeUnderSignature(t *testing.T) {
	sig := "    signature: { scheme: github, secrets: [\"{env.GH}\"] }\n"
	for _, tt := range []struct {
		name, yaml string
		scope      []keying.Template
		sender     bool
	}{
		{"no scope", "routes:\n" + route + sig, nil, true},
		{"defaults.scope", "defaults:\n  scope: [\"{header.X-Tenant}\"]\nroutes:\n" + route + sig, nil, true},
		{"the route's scope", "routes:\n" + route + sig + "    scope: [\"{header.X-Tenant}\"]\n", templates("{header.X-Tenant}"), false},
		{"the route's explicit none", "routes:\n" + route + sig + "    scope: []\n", nil, false},
		{"no signature", "defaults:\n  scope: [\"{header.X-Tenant}\"]\nroutes:\n" + route, templates("{header.X-Tenant}"), false},
	} {
		res := resolveOne(t, tt.yaml)
		if !reflect.DeepEqual(res.Scope, tt.scope) || res.ScopeSender != tt.sender {
			t.Errorf("%s: Scope %v ScopeSender %v", tt.name, res.Scope, res.ScopeSender)
		}
	}
}

// TestWarnings: what is allowed but probably wrong is a warning naming
// file, line and field (from Parse) or the field (Caddy's JSON).
func TestWarnings(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"ttl of the route shorter than Stripe's window", "routes:\n" + route + "    sender: stripe\n    ttl: 48h\n", []string{
			`r.yaml:6: routes[0].ttl: routes[0]'s ttl 48h0m0s is shorter than stripe's retry window, 72h0m0s (Stripe retries live-mode events for up to 3 days): a retry after the ttl executes again; set ttl: 72h0m0s or more`}},
		{"the default ttl, implied by the scheme", "routes:\n" + route + "    signature:\n      scheme: standard-webhooks\n      secrets: [\"{env.SW}\"]\n", []string{
			`r.yaml:4: routes[0].key: route "create_crm_deal" is keyed by the header Idempotency-Key ({header.Idempotency-Key}), which its standard-webhooks signature does not cover: a captured delivery sent again under a new id verifies and executes again; set same_payload_window (e.g. 24h0m0s) with on_same_payload: hold, or key by something signed`,
			`r.yaml:6: routes[0].signature.scheme: routes[0]'s ttl (the default) 24h0m0s is shorter than standard-webhooks's retry window, 75h35m5s (the Standard Webhooks specification's retry schedule ends 75h35m5s after the first attempt): a retry after the ttl executes again; set ttl: 76h0m0s or more`}},
		{"the defaults' ttl, the sender implied by the scheme", "defaults:\n  ttl: 2h\nroutes:\n" + route + "    signature: { scheme: shopify, secrets: [\"{env.SHOP}\"] }\n    same_payload_window: 2h\n    on_same_payload: hold\n", []string{
			`r.yaml:2: defaults.ttl: routes[0]'s ttl (from defaults.ttl) 2h0m0s is shorter than shopify's retry window, 4h0m0s (Shopify retries 8 times over 4 hours): a retry after the ttl executes again; set ttl: 4h0m0s or more`}},
		{"github's window", "routes:\n" + route + "    sender: github\n    ttl: 71h\n", []string{
			`r.yaml:6: routes[0].ttl: routes[0]'s ttl 71h0m0s is shorter than github's retry window, 72h0m0s (GitHub lets you redeliver deliveries of the past 3 days): a retry after the ttl executes again; set ttl: 72h0m0s or more`}},
		{"on_same_payload without a window", "defaults:\n  on_same_payload: hold\nroutes:\n" + route + "    on_same_payload: reject\n", []string{
			`r.yaml:2: defaults.on_same_payload: does nothing: no route has a same_payload_window`,
			`r.yaml:7: routes[0].on_same_payload: does nothing: the route has no same_payload_window`}},
		{"store_statuses of a status stored anyway", "routes:\n" + route + "    store_statuses: [404, 400]\n", []string{
			`r.yaml:5: routes[0].store_statuses[1]: 400 is not in the route's retry_statuses: it is stored anyway`}},
	} {
		r, err := Parse("r.yaml", []byte(tt.yaml), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := r.Warnings().Error(); got != strings.Join(tt.want, "\n") {
			t.Errorf("%s: warnings\n got %s\nwant %s", tt.name, got, strings.Join(tt.want, "\n"))
		}
		// From Caddy's JSON the same warnings name the field.
		_, b := jsonRoundTrip(t, r)
		var back Rules
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		for i, w := range back.Warnings() {
			if want := tt.want[i][strings.Index(tt.want[i], ": ")+2:]; w.Error() != want {
				t.Errorf("%s: from JSON\n got %s\nwant %s", tt.name, w, want)
			}
		}
	}
	r, err := Parse("r.yaml", []byte("routes:\n"+route+"    sender: stripe\n    ttl: 72h\n"), Limits{})
	if err != nil || r.Warnings() != nil {
		t.Errorf("a ttl as long as the window: %v %v", err, r.Warnings())
	}
}

// webhookHead and webhookRoute begin documents of one route, without
// and with a key.
const (
	webhookHead  = "routes:\n  - name: r\n    match: { path: /r }\n"
	webhookRoute = webhookHead + "    key: [\"{header.K}\"]\n"
)

// webhookErrorTests are invalid signature, sender, status and retention
// fields and the exact errors Parse reports (also FuzzParse's seeds).
var webhookErrorTests = []struct {
	name, yaml string
	want       []string
}{
	{"no scheme", webhookRoute + "    signature: { secrets: [\"{env.S}\"] }\n", []string{
		`r.yaml:5: routes[0].signature.scheme: is required: stripe, standard-webhooks, github, shopify, slack, twilio, paddle, square or hmac, unless the route's sender names it`}},
	{"unknown scheme", webhookRoute + "    signature: { scheme: paypal, secrets: [\"{env.S}\"] }\n", []string{
		`r.yaml:5: routes[0].signature.scheme: "paypal" is not one of stripe, standard-webhooks, github, shopify, slack, twilio, paddle, square, hmac`}},
	{"no secrets", webhookRoute + "    signature:\n      scheme: stripe\n", []string{
		`r.yaml:5: routes[0].signature: needs secrets (one sender) or senders (several), e.g. secrets: ["{env.WEBHOOK_SECRET}"]`}},
	{"secrets and senders", webhookRoute + "    signature:\n      scheme: stripe\n      secrets: [\"{env.S}\"]\n      senders: { a: [\"{env.A}\"] }\n", []string{
		`r.yaml:8: routes[0].signature.senders: is set beside secrets: use secrets for one sender, senders for several`}},
	{"a literal secret is never shown", webhookRoute + "    signature:\n      scheme: github\n      secrets:\n        - \"{env.GH}\"\n        - whsec_live_a1b2c3\n        - \"{env.GH}\"\n        - \"{env.GH\"\n", []string{
		`r.yaml:9: routes[0].signature.secrets[1]: must be a placeholder {env.NAME} or {file.PATH}, not the secret itself (a secret in the rules file ends up in a repository)`,
		`r.yaml:10: routes[0].signature.secrets[2]: {env.GH} is already listed at [0]`,
		`r.yaml:11: routes[0].signature.secrets[3]: must be a placeholder {env.NAME} or {file.PATH}, not the secret itself (a secret in the rules file ends up in a repository)`}},
	{"text around a placeholder", webhookRoute + "    signature: { scheme: github, secrets: [\"whsec_{env.S}\"] }\n", []string{
		`r.yaml:5: routes[0].signature.secrets[0]: must be a placeholder {env.NAME} or {file.PATH}, not the secret itself (a secret in the rules file ends up in a repository)`}},
	{"too many secrets", webhookRoute + "    signature: { scheme: github, secrets: [\"{env.A}\", \"{env.B}\", \"{env.C}\", \"{env.D}\", \"{env.E}\", \"{env.F}\", \"{env.G}\", \"{env.H}\", \"{env.I}\"] }\n", []string{
		`r.yaml:5: routes[0].signature.secrets: lists 9 secrets, at most 8 (the old and the new one during a rotation)`}},
	{"empty secrets", webhookRoute + "    signature: { scheme: github, secrets: [] }\n", []string{
		`r.yaml:5: routes[0].signature.secrets: must list at least one secret, e.g. ["{env.WEBHOOK_SECRET}"]`}},
	{"senders", webhookRoute + "    signature:\n      scheme: github\n      senders:\n        \"a b\": [\"{env.A}\"]\n        ok: []\n        plain: \"{env.P}\"\n", []string{
		`r.yaml:7: routes[0].signature.senders: "a b" is not a sender name: use 1 to 64 of A-Z a-z 0-9 _ . : -`,
		`r.yaml:9: routes[0].signature.senders.ok: must list at least one secret, e.g. ["{env.WEBHOOK_SECRET}"]`,
		`r.yaml:10: routes[0].signature.senders.plain: must be a list of strings, not the string "{env.P}"`}},
	{"empty senders", webhookRoute + "    signature: { scheme: github, senders: {} }\n", []string{
		`r.yaml:5: routes[0].signature.senders: must not be empty: name each sender and its secrets`}},
	{"tolerance", webhookRoute + "    signature: { scheme: stripe, secrets: [\"{env.S}\"], tolerance: 48h }\n", []string{
		`r.yaml:5: routes[0].signature.tolerance: must be at most 24h0m0s, got 48h0m0s`}},
	{"tolerance without a timestamp", webhookRoute + "    signature: { scheme: github, secrets: [\"{env.S}\"], tolerance: 5m }\n", []string{
		`r.yaml:5: routes[0].signature.tolerance: is set, but the github scheme signs no timestamp`}},
	{"hmac fields on another scheme", webhookRoute + "    signature:\n      scheme: stripe\n      secrets: [\"{env.S}\"]\n      header: X-Sig\n      prefix: \"\"\n", []string{
		`r.yaml:8: routes[0].signature.header: is a field of the hmac scheme; the stripe scheme fixes its own`,
		`r.yaml:9: routes[0].signature.prefix: is a field of the hmac scheme; the stripe scheme fixes its own`}},
	{"hmac without a header", webhookRoute + "    signature: { scheme: hmac, secrets: [\"{env.S}\"] }\n", []string{
		`r.yaml:5: routes[0].signature.header: is required: the header holding the signature, e.g. X-Signature`}},
	{"hmac fields", webhookRoute + "    signature:\n      scheme: hmac\n      secrets: [\"{env.S}\"]\n      header: \"X Sig\"\n      algorithm: md5\n      encoding: base32\n      prefix: \"sha 256=\"\n      signed: \"{timestamp}.{body}.{body}\"\n", []string{
		`r.yaml:5: routes[0].signature.timestamp_header: is required: signed has {timestamp}, and this header holds its unix seconds`,
		`r.yaml:8: routes[0].signature.header: "X Sig" is not a valid header name`,
		`r.yaml:9: routes[0].signature.algorithm: "md5" is not one of sha256, sha512`,
		`r.yaml:10: routes[0].signature.encoding: "base32" is not one of hex, base64`,
		`r.yaml:11: routes[0].signature.prefix: "sha 256=" must be visible ASCII, without spaces`,
		`r.yaml:12: routes[0].signature.signed: "{timestamp}.{body}.{body}": must have {body} once`}},
	{"hmac signed placeholders", webhookRoute + "    signature: { scheme: hmac, secrets: [\"{env.S}\"], header: X-S, signed: \"{id}.{body}\" }\n", []string{
		`r.yaml:5: routes[0].signature.signed: "{id}.{body}": placeholder {id} is not {timestamp} or {body}`}},
	{"hmac signed braces", webhookRoute + "    signature: { scheme: hmac, secrets: [\"{env.S}\"], header: X-S, signed: \"{body\" }\n", []string{
		`r.yaml:5: routes[0].signature.signed: "{body": unbalanced braces: the template takes text, {timestamp} and {body}`}},
	{"hmac timestamp header without a timestamp", webhookRoute + "    signature: { scheme: hmac, secrets: [\"{env.S}\"], header: X-S, timestamp_header: X-T, tolerance: 1m }\n", []string{
		`r.yaml:5: routes[0].signature.tolerance: is set, but signed has no {timestamp}: nothing is signed with a time`,
		`r.yaml:5: routes[0].signature.timestamp_header: is set, but signed has no {timestamp}`}},
	{"key still required but for standard-webhooks", webhookHead + "    signature: { scheme: stripe, secrets: [\"{env.S}\"] }\n", []string{
		`r.yaml:2: routes[0].key: at least one key template is required, e.g. ["{header.Idempotency-Key}"]`}},
	{"signature of the wrong kind", webhookRoute + "    signature: stripe\n", []string{
		`r.yaml:5: routes[0].signature: must be a mapping, not the string "stripe"`}},
	{"signature under defaults", "defaults:\n  signature: { scheme: stripe }\n" + webhookRoute, []string{
		`r.yaml:2: defaults.signature: unknown field`}},
	{"unknown sender", webhookRoute + "    sender: paypal\n", []string{
		`r.yaml:5: routes[0].sender: "paypal" is not one of github, paddle, shopify, slack, square, standard-webhooks, stripe, svix, twilio`}},
	{"empty sender", webhookRoute + "    sender: \"\"\n", []string{
		`r.yaml:5: routes[0].sender: "" is not one of github, paddle, shopify, slack, square, standard-webhooks, stripe, svix, twilio`}},
	{"store_statuses", "defaults:\n  retry_statuses: [404, 429]\n  store_statuses: [404, 503, 307, 200, 404]\n" + webhookRoute, []string{
		`r.yaml:3: defaults.store_statuses[0]: 404 is also in defaults.retry_statuses: a status is either released or stored; remove it from one list`,
		`r.yaml:3: defaults.store_statuses[1]: 503 is not a 4xx status: a 5xx outside retry_statuses is an unknown outcome (see on_unknown_outcome), a 307 or 308 follows on_redirect`,
		`r.yaml:3: defaults.store_statuses[2]: 307 is not a 4xx status: a 5xx outside retry_statuses is an unknown outcome (see on_unknown_outcome), a 307 or 308 follows on_redirect`,
		`r.yaml:3: defaults.store_statuses[3]: 200 is not a 4xx status: a 5xx outside retry_statuses is an unknown outcome (see on_unknown_outcome), a 307 or 308 follows on_redirect`,
		`r.yaml:3: defaults.store_statuses[4]: 404 is already listed at [0]`}},
	{"store_statuses in both lists of a route", webhookRoute + "    retry_statuses: [401, 429]\n    store_statuses:\n      - 401\n", []string{
		`r.yaml:7: routes[0].store_statuses[0]: 401 is also in routes[0].retry_statuses: a status is either released or stored; remove it from one list`}},
	{"tombstone_ttl", webhookRoute + "    tombstone_ttl: 9000h\n", []string{
		`r.yaml:5: routes[0].tombstone_ttl: must be at most 8760h0m0s, got 9000h0m0s`}},
	{"tombstone_ttl under 1s", webhookRoute + "    tombstone_ttl: 10ms\n", []string{
		`r.yaml:5: routes[0].tombstone_ttl: must be at least 1s, got 10ms`}},
	{"tombstone_ttl negative", webhookRoute + "    tombstone_ttl: -1h\n", []string{
		`r.yaml:5: routes[0].tombstone_ttl: must be positive or 0s (off), got -1h0m0s`}},
	{"tombstone_ttl without a unit", webhookRoute + "    tombstone_ttl: 30\n", []string{
		`r.yaml:5: routes[0].tombstone_ttl: 30 has no unit: write a Go duration such as 30s, 15m or 24h`}},
	{"after_expiry", webhookRoute + "    after_expiry: replay\n", []string{
		`r.yaml:5: routes[0].after_expiry: "replay" is not one of execute, reject`}},
	{"reject without tombstones", webhookRoute + "    after_expiry: reject\n    tombstone_ttl: 0s\n", []string{
		`r.yaml:5: routes[0].after_expiry: is reject, but tombstone_ttl is 0s: without tombstones no retry is known to be late`}},
	{"same_payload_window", "defaults:\n  same_payload_window: 1000h\n" + webhookRoute, []string{
		`r.yaml:2: defaults.same_payload_window: must be at most 720h0m0s, got 1000h0m0s`}},
	{"on_same_payload", webhookRoute + "    same_payload_window: 1h\n    on_same_payload: block\n", []string{
		`r.yaml:6: routes[0].on_same_payload: "block" is not one of warn, hold, reject`}},
}

func TestWebhookErrors(t *testing.T) {
	for _, tt := range webhookErrorTests {
		t.Run(tt.name, func(t *testing.T) { wantParseErrors(t, tt.yaml, tt.want) })
	}
}

// resolveOne parses and resolves a document of one route.
func resolveOne(t *testing.T, yaml string) Resolved {
	t.Helper()
	r, err := Parse("r.yaml", []byte(yaml), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}
