// Package senders holds the webhook senders a route can name with
// `sender: NAME`: for each, the signature scheme it uses, where its event
// or delivery id is (the route's key), the tolerance of the timestamp it
// signs, the retry window its documentation gives (the route's ttl
// floor), and whether its id is outside what it signs.
//
// The package is data only, so that config can resolve a route from it
// and signature can test each scheme against the vectors its sender's
// SDK made (testdata/vectors.json beside the signature package).
package senders

import (
	"slices"
	"time"
)

// Preset is what naming a sender sets on a route. Anything the route
// sets itself wins; the route always gives the secrets.
type Preset struct {
	// Name is the sender's name under `sender:`.
	Name string
	// Scheme is the signature scheme (config.SignatureScheme's value).
	Scheme string
	// Key are the key templates: the sender's event or delivery id.
	Key []string
	// Tolerance is how far the timestamp the sender signs may be from
	// the gateway's clock, either way; 0 when the sender signs none.
	Tolerance time.Duration
	// Window is how long after the first delivery the sender may deliver
	// the same event again: the floor of the route's ttl. 0 when the
	// sender documents no retries of its own.
	Window time.Duration
	// WindowSource says who publishes the window, and how.
	WindowSource string
	// UnsignedKey: the key is read from a header the signature does not
	// cover, so a captured delivery re-sent under a new id verifies. The
	// preset then holds a request whose payload equals one completed
	// within the ttl (same_payload_window: the ttl, on_same_payload:
	// hold).
	UnsignedKey bool
	// SignsURL: the signature covers the URL the sender posted to, which
	// the gateway rebuilds (see the signature's url field).
	SignsURL bool
	// Signed says what the sender signs, for people.
	Signed string
	// Docs names the sender's documentation the preset follows.
	Docs string
}

// The tolerances the senders' own SDKs apply, and the retry windows.
const (
	sdkTolerance    = 5 * time.Minute // stripe (DEFAULT_TOLERANCE 300), @slack/bolt, standardwebhooks, svix
	paddleTolerance = 5 * time.Second // @paddle/paddle-node-sdk (MAX_VALID_TIME_DIFFERENCE 5)
	threeDays       = 72 * time.Hour
	swSchedule      = 75*time.Hour + 35*time.Minute + 5*time.Second
	svixSchedule    = 27*time.Hour + 35*time.Minute + 5*time.Second
)

// presets are the senders, by name.
var presets = []Preset{
	{Name: "stripe", Scheme: "stripe", Key: []string{"{body.id}"}, Tolerance: sdkTolerance,
		Window: threeDays, WindowSource: "Stripe retries live-mode events for up to 3 days",
		Signed: "t.body", Docs: "Stripe: Receive Stripe events in your webhook endpoint (Verify webhook signatures; Retry behavior)"},
	{Name: "github", Scheme: "github", Key: []string{"{header.X-GitHub-Delivery}"},
		Window: threeDays, WindowSource: "GitHub lets you redeliver deliveries of the past 3 days", UnsignedKey: true,
		Signed: "body", Docs: "GitHub: Validating webhook deliveries; Redelivering webhooks"},
	{Name: "shopify", Scheme: "shopify", Key: []string{"{header.X-Shopify-Event-Id}", "{header.X-Shopify-Webhook-Id}"},
		Window: 4 * time.Hour, WindowSource: "Shopify retries 8 times over 4 hours", UnsignedKey: true,
		Signed: "body", Docs: "Shopify: Deliver webhooks through HTTPS (Verify webhooks; Ignore duplicate webhooks); changelog of 10 September 2024 (8 retries over 4 hours)"},
	{Name: "slack", Scheme: "slack", Key: []string{"{body.event_id}"}, Tolerance: sdkTolerance,
		Window: 6 * time.Minute, WindowSource: "Slack's Events API retries a failed event 3 times: at once, after 1 minute and after 5 minutes",
		Signed: "v0:timestamp:body", Docs: "Slack: Verifying requests from Slack; The Events API (Error handling, retries)"},
	{Name: "twilio", Scheme: "twilio", Key: []string{"{header.I-Twilio-Idempotency-Token}"},
		WindowSource: "Twilio retries a callback only within its URL's connection overrides (#rc, #tt), seconds apart", UnsignedKey: true, SignsURL: true,
		Signed: "URL + sorted form parameters (JSON: URL with bodySHA256)", Docs: "Twilio: Webhooks security (Validating signatures from Twilio); Webhooks connection overrides"},
	{Name: "paddle", Scheme: "paddle", Key: []string{"{body.event_id}"}, Tolerance: paddleTolerance,
		Window: threeDays, WindowSource: "Paddle retries live-account deliveries up to 60 times over 3 days",
		Signed: "ts:body", Docs: "Paddle: Verify webhook signatures; Handle webhook delivery"},
	{Name: "square", Scheme: "square", Key: []string{"{body.event_id}"},
		Window: threeDays, WindowSource: "Square retries unsuccessful deliveries for up to 72 hours after the event", SignsURL: true,
		Signed: "notification URL + body", Docs: "Square: Validate notifications (Verify the signature); Notification Delivery SLA"},
	{Name: "standard-webhooks", Scheme: "standard-webhooks", Key: []string{"{header.webhook-id}"}, Tolerance: sdkTolerance,
		Window: swSchedule, WindowSource: "the Standard Webhooks specification's retry schedule ends 75h35m5s after the first attempt",
		Signed: "id.timestamp.body", Docs: "Standard Webhooks specification 1.0.0 (Signature scheme; Deliverability and reliability)"},
	{Name: "svix", Scheme: "standard-webhooks", Key: []string{"{header.webhook-id}"}, Tolerance: sdkTolerance,
		Window: svixSchedule, WindowSource: "Svix's retry schedule ends 27h35m5s after the first attempt",
		Signed: "id.timestamp.body", Docs: "Svix: Verifying webhooks manually; Retries"},
}

// Lookup returns the preset named name.
func Lookup(name string) (Preset, bool) {
	i := slices.IndexFunc(presets, func(p Preset) bool { return p.Name == name })
	if i < 0 {
		return Preset{}, false
	}
	p := presets[i]
	p.Key = slices.Clone(p.Key)
	return p, true
}

// All returns every preset, in the order the documentation lists them.
func All() []Preset {
	out := make([]Preset, len(presets))
	for i, p := range presets {
		out[i] = p
		out[i].Key = slices.Clone(p.Key)
	}
	return out
}

// Names returns the senders' names, sorted.
func Names() []string {
	out := make([]string, len(presets))
	for i, p := range presets {
		out[i] = p.Name
	}
	slices.Sort(out)
	return out
}
