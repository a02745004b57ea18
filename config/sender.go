package config

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SenderInfo is what the gateway knows of a webhook sender: how long it
// may deliver one event again, and where that is published.
type SenderInfo struct {
	// Window is how long after the first delivery the sender may deliver
	// the same event again.
	Window time.Duration
	// Source says who publishes the window, and how.
	Source string
}

// Senders are the webhook senders a route's sender field may name, with
// their published retry windows:
//
//   - stripe: "In live mode, Stripe attempts to deliver a given event to
//     your webhook endpoint for up to 3 days with an exponential back
//     off" (Stripe's webhooks documentation): 72h.
//   - standard-webhooks: the Standard Webhooks specification (1.0.0,
//     "Deliverability and reliability") recommends a schedule spanning
//     several days; its example schedule's last attempt is at 75:35:05
//     after the first: 75h35m5s.
//   - svix: Svix's own schedule (docs.svix.com/retries: immediately, 5s,
//     5m, 30m, 2h, 5h, 10h, 10h), the one Svix-based senders use: its
//     last attempt is at 27h35m5s.
//   - github: GitHub does not redeliver failed deliveries by itself, but
//     lets you redeliver any delivery of the past 3 days (GitHub's
//     "Redelivering webhooks" documentation): 72h.
//   - shopify: "Webhooks will now be retried a total of 8 times over 4
//     hours" (Shopify's changelog, effective 10 September 2024, replacing
//     the 19 retries over 48 hours of before): 4h.
var Senders = map[string]SenderInfo{
	"stripe":            {72 * time.Hour, "Stripe retries live-mode events for up to 3 days"},
	"standard-webhooks": {75*time.Hour + 35*time.Minute + 5*time.Second, "the Standard Webhooks specification's retry schedule ends 75h35m5s after the first attempt"},
	"svix":              {27*time.Hour + 35*time.Minute + 5*time.Second, "Svix's retry schedule ends 27h35m5s after the first attempt"},
	"github":            {72 * time.Hour, "GitHub lets you redeliver deliveries of the past 3 days"},
	"shopify":           {4 * time.Hour, "Shopify retries 8 times over 4 hours"},
}

// schemeSender is the sender a signature scheme implies when a route
// names none: the scheme is the sender's own.
var schemeSender = map[SignatureScheme]string{
	SchemeStripe:           "stripe",
	SchemeStandardWebhooks: "standard-webhooks",
	SchemeGitHub:           "github",
}

// routeSender is the sender a route follows: its sender field, else the
// one its signature scheme implies, else "". field is where it is
// written.
func routeSender(f string, rt *Route) (name, field string) {
	if rt.Sender != "" {
		return rt.Sender, f + "sender"
	}
	if rt.Signature != nil {
		return schemeSender[rt.Signature.Scheme], f + "signature.scheme"
	}
	return "", ""
}

// checkSender checks route i's sender and warns when the route's ttl,
// its own or inherited, is shorter than the sender's retry window: a
// retry after the ttl executes again.
func (c *errorList) sender(i int, rt *Route, def *Policy) {
	f := "routes[" + strconv.Itoa(i) + "]."
	if rt.Sender != "" || c.isWritten(f+"sender") {
		names := slices.Sorted(maps.Keys(Senders))
		if _, ok := Senders[rt.Sender]; !ok {
			c.add(f+"sender", "%s is not one of %s", quote(rt.Sender), strings.Join(names, ", "))
			return
		}
	}
	name, field := routeSender(f, rt)
	s, ok := Senders[name]
	if !ok {
		return
	}
	ttl, from := rt.TTL, "ttl"
	switch {
	case rt.TTL != 0:
		field = f + "ttl"
	case def.TTL != 0:
		ttl, field, from = def.TTL, "defaults.ttl", "ttl (from defaults.ttl)"
	default:
		ttl, from = Duration(defaultTTL), "ttl (the default)"
	}
	if time.Duration(ttl) < s.Window {
		c.warn(field, "routes[%d]'s %s %s is shorter than %s's retry window, %s (%s): a retry after the ttl executes again; set ttl: %s or more",
			i, from, ttl, name, s.Window, s.Source, roundUp(s.Window))
	}
}

// roundUp rounds d up to whole hours, for a ttl to suggest.
func roundUp(d time.Duration) time.Duration { return (d + time.Hour - 1).Truncate(time.Hour) }
