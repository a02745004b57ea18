package config

import (
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/signature/senders"
)

// SenderInfo is what the gateway knows of a webhook sender: how long it
// may deliver one event again, and where that is published.
type SenderInfo struct {
	// Window is how long after the first delivery the sender may deliver
	// the same event again (0: it documents no retries of its own).
	Window time.Duration
	// Source says who publishes the window, and how.
	Source string
}

// Senders are the webhook senders a route's sender field may name, with
// their published retry windows: the presets of package senders
// (stripe, github, shopify, slack, twilio, paddle, square,
// standard-webhooks, svix), where each window's source is given.
var Senders = func() map[string]SenderInfo {
	out := map[string]SenderInfo{}
	for _, p := range senders.All() {
		out[p.Name] = SenderInfo{Window: p.Window, Source: p.WindowSource}
	}
	return out
}()

// schemeSender is the sender a signature scheme implies when a route
// names none: the scheme is the sender's own. It gives the retry
// window's warning only; the preset applies when the route names it.
var schemeSender = map[SignatureScheme]string{
	SchemeStripe:           "stripe",
	SchemeStandardWebhooks: "standard-webhooks",
	SchemeGitHub:           "github",
	SchemeShopify:          "shopify",
	SchemeSlack:            "slack",
	SchemeTwilio:           "twilio",
	SchemePaddle:           "paddle",
	SchemeSquare:           "square",
}

// routePreset is the sender preset a route names with its sender field.
func routePreset(rt *Route) (senders.Preset, bool) {
	if rt.Sender == "" {
		return senders.Preset{}, false
	}
	return senders.Lookup(rt.Sender)
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

// sender checks route i's sender and warns when the route's ttl is
// shorter than the sender's retry window: a retry after the ttl
// executes again. A route that names its sender has the window as its
// ttl's floor, so only a ttl it sets itself can be shorter; one whose
// sender its scheme implies is warned of an inherited ttl too.
func (c *errorList) sender(i int, rt *Route, def *Policy) {
	f := "routes[" + strconv.Itoa(i) + "]."
	if rt.Sender != "" || c.isWritten(f+"sender") {
		if _, ok := Senders[rt.Sender]; !ok {
			c.add(f+"sender", "%s is not one of %s", quote(rt.Sender), strings.Join(senders.Names(), ", "))
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
	case rt.Sender != "":
		return // the window is the ttl's floor
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
