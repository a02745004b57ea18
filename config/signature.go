package config

import (
	"cmp"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// SignatureScheme is a value of Signature.Scheme: how a sender signs its
// webhooks.
type SignatureScheme string

const (
	// SchemeStripe: Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=…];
	// HMAC-SHA256 of "<t>.<body>" keyed by the whsec_… secret as it is.
	SchemeStripe SignatureScheme = "stripe"
	// SchemeStandardWebhooks: webhook-id, webhook-timestamp and
	// webhook-signature: v1,<base64> [v1,<base64> …]; HMAC-SHA256 of
	// "<id>.<timestamp>.<body>" keyed by the base64 bytes of the whsec_…
	// secret.
	SchemeStandardWebhooks SignatureScheme = "standard-webhooks"
	// SchemeGitHub: X-Hub-Signature-256: sha256=<hex>, HMAC-SHA256 of the
	// body keyed by the secret as it is. No timestamp.
	SchemeGitHub SignatureScheme = "github"
	// SchemeHMAC: a generic HMAC in a header the route names (see
	// Signature's header, algorithm, encoding, prefix, signed and
	// timestamp_header).
	SchemeHMAC SignatureScheme = "hmac"
	// SchemeShopify: X-Shopify-Hmac-Sha256: <base64>, HMAC-SHA256 of the
	// body keyed by the app's secret as it is. No timestamp.
	SchemeShopify SignatureScheme = "shopify"
	// SchemeSlack: X-Slack-Signature: v0=<hex>, HMAC-SHA256 of
	// "v0:<X-Slack-Request-Timestamp>:<body>" keyed by the signing secret.
	SchemeSlack SignatureScheme = "slack"
	// SchemeTwilio: X-Twilio-Signature: <base64>, HMAC-SHA1 keyed by the
	// auth token of the full URL the sender posted to followed by each
	// form parameter's name and value, sorted by name; for a JSON body
	// the URL carries bodySHA256, the body's hex SHA-256, and nothing
	// follows it. No timestamp.
	SchemeTwilio SignatureScheme = "twilio"
	// SchemePaddle: Paddle-Signature: ts=<unix seconds>;h1=<hex>[;h1=…],
	// HMAC-SHA256 of "<ts>:<body>" keyed by the secret as it is.
	SchemePaddle SignatureScheme = "paddle"
	// SchemeSquare: X-Square-Hmacsha256-Signature: <base64>, HMAC-SHA256
	// of the notification URL followed by the body, keyed by the
	// subscription's signature key. No timestamp.
	SchemeSquare SignatureScheme = "square"
)

// schemes are the schemes, in the order errors list them.
var schemes = []SignatureScheme{SchemeStripe, SchemeStandardWebhooks, SchemeGitHub, SchemeShopify, SchemeSlack,
	SchemeTwilio, SchemePaddle, SchemeSquare, SchemeHMAC}

// Timed reports whether scheme signs a timestamp; for hmac, whether
// signed has {timestamp}.
func Timed(scheme SignatureScheme, signed string) bool {
	switch scheme {
	case SchemeStripe, SchemeStandardWebhooks, SchemeSlack, SchemePaddle:
		return true
	case SchemeHMAC:
		return strings.Contains(signed, "{timestamp}")
	}
	return false
}

// SignsURL reports whether scheme signs the URL the sender posted to.
func SignsURL(scheme SignatureScheme) bool { return scheme == SchemeTwilio || scheme == SchemeSquare }

// Limits and defaults of a signature rule.
const (
	defaultTolerance     = 5 * time.Minute
	minTolerance         = time.Second
	maxTolerance         = 24 * time.Hour
	maxSecretsPerSender  = 8
	maxSenders           = 16
	defaultSenderName    = "default"
	defaultHMACAlgorithm = "sha256"
	defaultHMACEncoding  = "hex"
	defaultSigned        = "{body}"
	maxSignedTemplate    = 256
)

// standardWebhooksKey is the key of a standard-webhooks route without
// one: the message id, the same on every delivery of one event.
const standardWebhooksKey = "{header.webhook-id}"

// Signature is a route's webhook signature check. It runs before
// anything is claimed: a request whose signature does not verify gets
// 401 problem+json signature-invalid, nothing is claimed or forwarded,
// and idemgate_signature_failures_total{route,reason} counts it.
//
// Secrets are {env.NAME} or {file.PATH} placeholders, never the secret
// itself (a rules file ends up in a repository), filled in when the
// config loads. Several secrets of one sender are tried in turn, so a
// secret can be rotated without refusing events signed by the old one.
//
// The verified sender is the route's scope unless the route sets scope
// itself: two senders' event ids never share a key. A sender's identity
// is "<scheme>:<name>" with its name under senders, or
// "<scheme>:default" for the flat secrets list; it does not depend on
// the secret, so rotating a secret keeps every key.
type Signature struct {
	// Scheme is stripe, standard-webhooks, github, shopify, slack,
	// twilio, paddle, square or hmac. Required, unless the route's
	// sender names a preset, whose scheme it then is.
	Scheme SignatureScheme `json:"scheme,omitempty"`
	// Secrets are the secrets of the route's one sender, old and new
	// during a rotation: 1 to 8 placeholders {env.NAME} or {file.PATH}.
	// Not with Senders.
	Secrets []string `json:"secrets,omitempty"`
	// Senders maps each sender's name (1 to 64 of A-Z a-z 0-9 _ . : -)
	// to its secrets (1 to 8 placeholders each), for a route that
	// receives from several senders: at most 16. Each is its own scope.
	// Not with Secrets.
	Senders map[string][]string `json:"senders,omitempty"`
	// Tolerance is how far a signed timestamp may be from the gateway's
	// clock, in the past or the future, 1s to 24h; older or newer is
	// refused. Default: the sender preset's, else 5m. Only for schemes
	// that sign a timestamp (stripe, standard-webhooks, slack, paddle, and
	// an hmac that signs {timestamp}).
	Tolerance Duration `json:"tolerance,omitempty"`
	// URL (twilio and square only) is the public URL the sender posts
	// to, as configured at the sender (https://hooks.example.com/twilio),
	// without a query: the request's query string is appended to it.
	// Default: the URL rebuilt from the request, its scheme and host
	// from X-Forwarded-Proto and X-Forwarded-Host when the request comes
	// from one of the server's trusted_proxies, else from the connection
	// and the Host header.
	URL string `json:"url,omitempty"`
	// Header (hmac only, required) names the header holding the signature.
	Header string `json:"header,omitempty"`
	// Algorithm (hmac only) is sha256 (default) or sha512.
	Algorithm string `json:"algorithm,omitempty"`
	// Encoding (hmac only) is how the header writes the MAC: hex (default)
	// or base64.
	Encoding string `json:"encoding,omitempty"`
	// Prefix (hmac only) is text before the MAC in the header, such as
	// "sha256=" or "v0=". Default none.
	Prefix string `json:"prefix,omitempty"`
	// Signed (hmac only) is what is signed: {body} (default), or a
	// template of text, {timestamp} (at most once) and {body} (once),
	// such as "v0:{timestamp}:{body}".
	Signed string `json:"signed,omitempty"`
	// TimestampHeader (hmac only) names the header holding the unix
	// seconds that {timestamp} stands for; required exactly when signed
	// has {timestamp}.
	TimestampHeader string `json:"timestamp_header,omitempty"`
}

// SignatureRule is a route's resolved signature check: the scheme, the
// senders and every field filled in. Secrets are still placeholders.
type SignatureRule struct {
	Scheme SignatureScheme
	// Senders are sorted by name; a flat secrets list is one sender
	// named "default".
	Senders []SignatureSender
	// Tolerance bounds a signed timestamp's distance from now; 0 when
	// the scheme signs none (github, an hmac without {timestamp}).
	Tolerance time.Duration
	// The hmac scheme's fields ("" for the other schemes): the
	// signature's header (canonical), sha256 or sha512, hex or base64,
	// the prefix, the signed template, and the timestamp's header
	// (canonical; "" when the template has no {timestamp}).
	Header, Algorithm, Encoding, Prefix, Signed, TimestampHeader string
	// URL is the public URL a twilio or square signature covers; "" to
	// rebuild it from the request.
	URL string
}

// SignatureSender is one sender of a route and its secrets' placeholders.
type SignatureSender struct {
	Name    string
	Secrets []string
}

// Identity is the verified sender's identity, the route's default scope:
// "<scheme>:<name>".
func (r *SignatureRule) Identity(sender string) string { return string(r.Scheme) + ":" + sender }

// SignedParts splits the hmac scheme's signed template into literal text
// and the placeholders "{body}" and "{timestamp}", in order; a template
// that Validate accepted.
func (r *SignatureRule) SignedParts() []string {
	parts, _ := signedParts(r.Signed)
	return parts
}

// signedParts splits a signed template, or says what is wrong with it.
func signedParts(t string) ([]string, string) {
	var parts []string
	bodies, stamps := 0, 0
	for rest := t; rest != ""; {
		i := strings.IndexAny(rest, "{}")
		switch {
		case i < 0:
			parts, rest = append(parts, rest), ""
			continue
		case i > 0:
			parts, rest = append(parts, rest[:i]), rest[i:]
			continue
		}
		end := strings.IndexByte(rest, '}')
		if rest[0] == '}' || end < 0 {
			return nil, "unbalanced braces: the template takes text, {timestamp} and {body}"
		}
		switch p := rest[:end+1]; p {
		case "{body}":
			bodies++
		case "{timestamp}":
			stamps++
		default:
			return nil, "placeholder " + p + " is not {timestamp} or {body}"
		}
		parts, rest = append(parts, rest[:end+1]), rest[end+1:]
	}
	switch {
	case bodies != 1:
		return nil, "must have {body} once"
	case stamps > 1:
		return nil, "may have {timestamp} once"
	case len(t) > maxSignedTemplate || strings.ContainsFunc(t, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return nil, "must be at most 256 characters, without control characters"
	}
	return parts, ""
}

// secretRE matches a secret written as a placeholder: the whole value is
// {env.NAME} or {file.PATH}.
var secretRE = regexp.MustCompile(`^\{(?:env\.[A-Za-z_][A-Za-z0-9_]*|file\.[^{}\x00-\x1f]+)\}$`)

// signature checks route f's signature (f is "routes[i].").
func (c *errorList) signature(f string, rt *Route) {
	s := rt.Signature
	if s == nil {
		return
	}
	f += "signature."
	scheme := routeScheme(rt)
	names := make([]string, len(schemes))
	for i, sc := range schemes {
		names[i] = string(sc)
	}
	switch {
	case s.Scheme != "" || c.isWritten(f+"scheme"):
		enum(c, f+"scheme", s.Scheme, schemes...)
	case scheme == "":
		c.add(f+"scheme", "is required: %s or %s, unless the route's sender names it", strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	}
	switch {
	case s.Secrets != nil && s.Senders != nil:
		c.add(f+"senders", "is set beside secrets: use secrets for one sender, senders for several")
	case s.Secrets == nil && s.Senders == nil:
		c.add(f[:len(f)-1], "needs secrets (one sender) or senders (several), e.g. secrets: [\"{env.WEBHOOK_SECRET}\"]")
	case s.Senders != nil && len(s.Senders) == 0:
		c.add(f+"senders", "must not be empty: name each sender and its secrets")
	case len(s.Senders) > maxSenders:
		c.add(f+"senders", "has %d senders, at most %d", len(s.Senders), maxSenders)
	}
	if s.Secrets != nil {
		c.secrets(f+"secrets", s.Secrets)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Senders)) {
		if !validName(name) {
			c.add(f+"senders", "%s is not a sender name: use 1 to 64 of A-Z a-z 0-9 _ . : -", quote(name))
		}
		c.secrets(f+"senders."+name, s.Senders[name])
	}

	timed := Timed(scheme, s.Signed)
	c.duration(f+"tolerance", s.Tolerance, minTolerance)
	switch {
	case time.Duration(s.Tolerance) > maxTolerance:
		c.add(f+"tolerance", "must be at most %s, got %s", maxTolerance, s.Tolerance)
	case s.Tolerance != 0 && !timed && scheme == SchemeHMAC:
		c.add(f+"tolerance", "is set, but signed has no {timestamp}: nothing is signed with a time")
	case s.Tolerance != 0 && !timed && scheme != "":
		c.add(f+"tolerance", "is set, but the %s scheme signs no timestamp", scheme)
	}
	c.signatureURL(f+"url", scheme, s.URL)

	hmacFields := map[string]string{"header": s.Header, "algorithm": s.Algorithm, "encoding": s.Encoding,
		"prefix": s.Prefix, "signed": s.Signed, "timestamp_header": s.TimestampHeader}
	if scheme != SchemeHMAC {
		for _, name := range slices.Sorted(maps.Keys(hmacFields)) {
			if hmacFields[name] != "" || c.isWritten(f+name) {
				c.add(f+name, "is a field of the hmac scheme; the %s scheme fixes its own", cmp.Or(string(scheme), "route's"))
			}
		}
		return
	}
	switch {
	case s.Header == "":
		c.add(f+"header", "is required: the header holding the signature, e.g. X-Signature")
	case !httpguts.ValidHeaderFieldName(s.Header):
		c.add(f+"header", "%s is not a valid header name", quote(s.Header))
	}
	enum(c, f+"algorithm", s.Algorithm, "sha256", "sha512")
	enum(c, f+"encoding", s.Encoding, "hex", "base64")
	if strings.ContainsFunc(s.Prefix, func(r rune) bool { return r <= 0x20 || r >= 0x7f }) {
		c.add(f+"prefix", "%s must be visible ASCII, without spaces", quote(s.Prefix))
	}
	if s.Signed != "" || c.isWritten(f+"signed") {
		if _, msg := signedParts(s.Signed); msg != "" {
			c.add(f+"signed", "%s: %s", quote(s.Signed), msg)
		}
	}
	switch {
	case timed && s.TimestampHeader == "":
		c.add(f+"timestamp_header", "is required: signed has {timestamp}, and this header holds its unix seconds")
	case !timed && (s.TimestampHeader != "" || c.isWritten(f+"timestamp_header")):
		c.add(f+"timestamp_header", "is set, but signed has no {timestamp}")
	case timed && !httpguts.ValidHeaderFieldName(s.TimestampHeader):
		c.add(f+"timestamp_header", "%s is not a valid header name", quote(s.TimestampHeader))
	}
}

// secrets checks one sender's secrets: 1 to 8 placeholders, each once.
// A value that is not a placeholder is never quoted: it may be a secret.
func (c *errorList) secrets(field string, secrets []string) {
	switch {
	case len(secrets) == 0:
		c.add(field, "must list at least one secret, e.g. [\"{env.WEBHOOK_SECRET}\"]")
	case len(secrets) > maxSecretsPerSender:
		c.add(field, "lists %d secrets, at most %d (the old and the new one during a rotation)", len(secrets), maxSecretsPerSender)
	}
	for j, s := range secrets {
		switch k := slices.Index(secrets, s); {
		case !secretRE.MatchString(s):
			c.add(at(field, j), "must be a placeholder {env.NAME} or {file.PATH}, not the secret itself (a secret in the rules file ends up in a repository)")
		case k < j:
			c.add(at(field, j), "%s is already listed at [%d]", s, k)
		}
	}
}

// signatureURL checks a signature's url: only for a scheme that signs
// the URL, an absolute http or https URL without query or fragment.
func (c *errorList) signatureURL(field string, scheme SignatureScheme, raw string) {
	if raw == "" && !c.isWritten(field) {
		return
	}
	if !SignsURL(scheme) {
		c.add(field, "is set, but the %s scheme signs no URL (only twilio and square do)", cmp.Or(string(scheme), "route's"))
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil ||
		strings.ContainsFunc(raw, func(r rune) bool { return r <= 0x20 || r >= 0x7f }) {
		c.add(field, "%s is not the URL the sender posts to: write it as configured at the sender, http(s)://host[:port]/path, without query, fragment or user", quote(raw))
	}
}

// routeScheme is a route's signature scheme: its own, else its sender
// preset's; "" when neither.
func routeScheme(rt *Route) SignatureScheme {
	if rt.Signature != nil && rt.Signature.Scheme != "" {
		return rt.Signature.Scheme
	}
	if p, ok := routePreset(rt); ok {
		return SignatureScheme(p.Scheme)
	}
	return ""
}

// resolveSignature resolves a route's signature rule; nil for none. A
// sender preset gives the scheme and the tolerance the route leaves out.
func resolveSignature(rt *Route) *SignatureRule {
	s := rt.Signature
	if s == nil {
		return nil
	}
	preset, _ := routePreset(rt)
	r := &SignatureRule{Scheme: routeScheme(rt), URL: s.URL}
	if s.Secrets != nil {
		r.Senders = []SignatureSender{{Name: defaultSenderName, Secrets: slices.Clone(s.Secrets)}}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Senders)) {
		r.Senders = append(r.Senders, SignatureSender{Name: name, Secrets: slices.Clone(s.Senders[name])})
	}
	if r.Scheme == SchemeHMAC {
		r.Header = http.CanonicalHeaderKey(s.Header)
		r.Algorithm = cmp.Or(s.Algorithm, defaultHMACAlgorithm)
		r.Encoding = cmp.Or(s.Encoding, defaultHMACEncoding)
		r.Prefix = s.Prefix
		r.Signed = cmp.Or(s.Signed, defaultSigned)
		if strings.Contains(r.Signed, "{timestamp}") {
			r.TimestampHeader = http.CanonicalHeaderKey(s.TimestampHeader)
		}
	}
	if Timed(r.Scheme, r.Signed) {
		tol := defaultTolerance
		if preset.Tolerance > 0 && SignatureScheme(preset.Scheme) == r.Scheme {
			tol = preset.Tolerance
		}
		r.Tolerance = time.Duration(cmp.Or(s.Tolerance, Duration(tol)))
	}
	return r
}
