package config

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// A signed route keyed by something its signature does not cover (a
// delivery id in a header of its own) lets anybody who captured one
// delivery send it again under a new id: the signature still verifies,
// and the new key executes. A sender preset whose key is such holds the
// same payload under a new key for the route's ttl; any other such route
// is a config warning.

// signedHeaders are the headers each scheme signs, canonical.
var signedHeaders = map[SignatureScheme][]string{
	SchemeStandardWebhooks: {"Webhook-Id", "Webhook-Timestamp"},
	SchemeSlack:            {"X-Slack-Request-Timestamp"},
}

// unsignedKeyPart returns the first placeholder of key templates that
// the signature rule does not cover, and the template it is in; ok is
// false when every placeholder is covered. The body (and the form in
// it) is signed by every scheme; the query only by a scheme that signs
// the URL, when the URL is rebuilt from the request; a header only when
// the scheme signs it.
func unsignedKeyPart(rule *SignatureRule, key []keying.Template) (tmpl string, p keying.Placeholder, ok bool) {
	headers := signedHeaders[rule.Scheme]
	if rule.TimestampHeader != "" {
		headers = append(slices.Clone(headers), rule.TimestampHeader)
	}
	for _, t := range key {
		for _, p := range t.Placeholders() {
			switch p.Source {
			case "body", "form":
				continue
			case "query":
				if SignsURL(rule.Scheme) {
					continue
				}
			case "header":
				if slices.Contains(headers, http.CanonicalHeaderKey(p.Name)) {
					continue
				}
			}
			return t.String(), p, true
		}
	}
	return "", keying.Placeholder{}, false
}

// captured warns of route i, signed and keyed by something its
// signature does not cover, unless the same payload under a new key is
// held or refused within a window.
func (c *errorList) captured(i int, rt *Route, def *Policy) {
	if rt.Signature == nil || routeScheme(rt) == "" {
		return
	}
	res := resolveRoute(rt, def)
	tmpl, p, ok := unsignedKeyPart(res.Signature, res.Key)
	if !ok || res.SamePayloadWindow > 0 && res.OnSamePayload != OnSamePayloadWarn {
		return
	}
	f := "routes[" + strconv.Itoa(i) + "]."
	field := f + "key"
	if len(rt.Key) == 0 {
		field = f + "sender"
	}
	what := "the " + p.Source + " " + p.Name
	if p.Source == "header" {
		what = "the header " + p.Name
	}
	c.warn(field, "route %s is keyed by %s (%s), which its %s signature does not cover: a captured delivery sent again under a new id verifies and executes again; set same_payload_window (e.g. %s) with on_same_payload: hold, or key by something signed",
		quote(rt.Name), what, tmpl, res.Signature.Scheme, time.Duration(res.TTL).String())
}

// presetSamePayload is the same-payload rule a sender preset turns on
// for route res, keyed by something its signature does not cover: the
// route's ttl (at most the window's maximum), hold.
func presetSamePayload(res *Resolved) (time.Duration, OnSamePayload, bool) {
	if res.Signature == nil {
		return 0, "", false
	}
	if _, _, ok := unsignedKeyPart(res.Signature, res.Key); !ok {
		return 0, "", false
	}
	return min(res.TTL, maxSamePayloadWindow), OnSamePayloadHold, true
}
