// Package signature verifies the signatures webhook senders put on their
// deliveries, before the gateway claims anything for them: Stripe's,
// Standard Webhooks', GitHub's, Shopify's, Slack's, Twilio's, Paddle's,
// Square's, and a generic HMAC in a named header. Package senders holds
// the presets that name them; testdata/vectors.json holds deliveries
// each sender's own SDK signed, and the script that made them.
//
// A Verifier is built once per route from its resolved rule
// (config.SignatureRule) and its secrets, filled in from their {env.NAME}
// and {file.PATH} placeholders. CheckSignature tries every secret of every
// sender with constant-time comparisons, refuses a signed timestamp
// farther from now than the rule's tolerance in either direction, and
// says which sender signed:
//
//   - the sender's identity is "<scheme>:<name>", the name it has under
//     the rule's senders, or "<scheme>:default" for a flat secrets list.
//     It never depends on which of the sender's secrets matched, so keys
//     scoped by it stay the same when a secret is rotated (the old and
//     the new secret listed together), and two senders never share one.
//   - a refusal carries a Reason for the metric; the HTTP answer never
//     says which part failed.
//
// No input panics: headers are read within MaxHeaderLen and at most
// MaxSignatures candidate signatures, and anything else is malformed.
package signature

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/config"
)

// Reason says why a request's signature was refused: the label reason of
// idemgate_signature_failures_total.
type Reason string

const (
	// Missing: the request has no signature header.
	Missing Reason = "missing"
	// Malformed: a signature header is there but cannot be read (repeated,
	// too long, a wrong prefix or encoding, no signature of the scheme's
	// version, a timestamp that is not unix seconds, a missing message id).
	Malformed Reason = "malformed"
	// Timestamp: the signed timestamp is missing, or farther from now than
	// the tolerance, in the past or the future.
	Timestamp Reason = "timestamp"
	// Mismatch: no secret of any sender gives any of the signatures.
	Mismatch Reason = "mismatch"
)

// Reasons are every Reason, for a metric's labels.
var Reasons = []Reason{Missing, Malformed, Timestamp, Mismatch}

// Bounds on what a request may carry.
const (
	// MaxHeaderLen is the longest signature header (or timestamp or id
	// header) read, in bytes; a longer one is malformed.
	MaxHeaderLen = 4096
	// MaxSignatures is how many signatures one header may list; more is
	// malformed.
	MaxSignatures = 16
)

// Verifier checks one route's webhook signatures. It is safe for
// concurrent use.
type Verifier struct {
	scheme    scheme
	hash      func() hash.Hash
	tolerance time.Duration // 0: the scheme signs no timestamp
	senders   []sender
}

// sender is one sender's identity and keys.
type sender struct {
	id   string
	keys [][]byte
}

// scheme reads what a request signs and the signatures it carries.
type scheme interface {
	// header names the header that carries the signatures.
	header() string
	// read returns the signed message and the signatures of a request
	// whose signature header is sig, or why they cannot be had. url is
	// the URL the sender posted to, for a scheme that signs it.
	read(sig string, h http.Header, url string, body []byte) (message, Reason)
	// key turns a resolved secret into the HMAC key, or says why it is
	// not a secret of the scheme (never quoting it).
	key(secret string) ([]byte, error)
}

// message is what a request signs, in parts (so that the body is not
// copied), and the signatures it carries. alt, when set, is another
// form of the message that also verifies (Twilio's URL with and without
// its default port).
type message struct {
	parts [][]byte
	alt   [][]byte
	sigs  [][]byte
	at    int64 // the signed unix seconds, when timed
	timed bool
}

// New builds the verifier of rule, filling each secret's placeholders
// with resolve (such as Caddy's replacer: {env.NAME}, {file.PATH}). Its
// errors name the sender and the secret's place and placeholder, never
// a secret's value.
func New(rule config.SignatureRule, resolve func(tmpl string) (string, error)) (*Verifier, error) {
	v := &Verifier{hash: sha256.New, tolerance: rule.Tolerance}
	switch rule.Scheme {
	case config.SchemeStripe:
		v.scheme = stripe{}
	case config.SchemeStandardWebhooks:
		v.scheme = standardWebhooks{}
	case config.SchemeGitHub:
		v.scheme = github{}
	case config.SchemeShopify, config.SchemeSlack:
		v.scheme, v.hash = fixedHMAC(rule.Scheme), sha256.New
	case config.SchemeTwilio:
		v.scheme, v.hash = twilio{}, sha1.New
	case config.SchemePaddle:
		v.scheme = paddle{}
	case config.SchemeSquare:
		v.scheme = square{}
	case config.SchemeHMAC:
		h, err := newHMAC(&rule)
		if err != nil {
			return nil, err
		}
		v.scheme, v.hash = h, h.hash
	default:
		return nil, fmt.Errorf("signature: unknown scheme %q", rule.Scheme)
	}
	if timed(v.scheme) && v.tolerance <= 0 {
		return nil, fmt.Errorf("signature: the %s scheme signs a timestamp and needs a positive tolerance", rule.Scheme)
	}
	if len(rule.Senders) == 0 {
		return nil, errors.New("signature: no sender has a secret")
	}
	for _, s := range rule.Senders {
		snd := sender{id: rule.Identity(s.Name)}
		for j, tmpl := range s.Secrets {
			where := fmt.Sprintf("signature: sender %s, secret %d (%s)", s.Name, j, tmpl)
			secret, err := resolve(tmpl)
			switch {
			case err != nil:
				return nil, fmt.Errorf("%s: %w", where, err)
			case secret == "":
				// A rotation's other secret that is not set (yet, or
				// any more): the sender's other secrets still verify.
				continue
			}
			key, err := v.scheme.key(secret)
			if err == nil {
				err = checkStrength(v.scheme, secret, key)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			snd.keys = append(snd.keys, key)
		}
		if len(snd.keys) == 0 {
			return nil, fmt.Errorf("signature: sender %s has no secret: each of %s is empty once filled in (is the environment variable set, the file readable?)", s.Name, strings.Join(s.Secrets, ", "))
		}
		v.senders = append(v.senders, snd)
	}
	return v, nil
}

// timed reports whether s signs a timestamp.
func timed(s scheme) bool {
	switch s := s.(type) {
	case stripe, standardWebhooks, paddle:
		return true
	case *hmacScheme:
		return s.timestampHeader != ""
	}
	return false
}

// CheckSignature checks the signature of a request with header h and
// body body at time now. ok is true when a secret of a sender gives one
// of the signatures; sender is then that sender's identity, the route's
// default scope. Otherwise reason says why, for the metric only.
func (v *Verifier) CheckSignature(h http.Header, body []byte, now time.Time) (sender string, reason Reason, ok bool) {
	return v.CheckSignatureURL(h, "", body, now)
}

// NeedsURL reports whether the scheme signs the URL the sender posted
// to: CheckSignatureURL must then be given it.
func (v *Verifier) NeedsURL() bool {
	switch v.scheme.(type) {
	case twilio, square:
		return true
	}
	return false
}

// CheckSignatureURL is CheckSignature for a request the sender posted to
// url, the full URL with its query, as the sender had it (see NeedsURL).
func (v *Verifier) CheckSignatureURL(h http.Header, url string, body []byte, now time.Time) (sender string, reason Reason, ok bool) {
	sig, reason := header(h, v.scheme.header())
	if reason != "" {
		return "", reason, false
	}
	m, reason := v.scheme.read(sig, h, url, body)
	if reason != "" {
		return "", reason, false
	}
	if m.timed {
		// In whole seconds, as signed; Sub saturates far from now.
		if skew := time.Unix(now.Unix(), 0).Sub(time.Unix(m.at, 0)); skew > v.tolerance || skew < -v.tolerance {
			return "", Timestamp, false
		}
	}
	for _, s := range v.senders {
		for _, k := range s.keys {
			if v.matches(k, m.parts, m.sigs) || m.alt != nil && v.matches(k, m.alt, m.sigs) {
				return s.id, "", true
			}
		}
	}
	return "", Mismatch, false
}

// matches reports whether the HMAC of parts under key is one of sigs.
func (v *Verifier) matches(key []byte, parts, sigs [][]byte) bool {
	mac := hmac.New(v.hash, key)
	for _, p := range parts {
		mac.Write(p)
	}
	sum := mac.Sum(nil)
	for _, sig := range sigs {
		if hmac.Equal(sum, sig) {
			return true
		}
	}
	return false
}

// header returns the one value of header name: Missing when there is
// none or it is empty, Malformed when it is repeated or too long.
func header(h http.Header, name string) (string, Reason) {
	switch vs := h.Values(name); {
	case len(vs) == 0 || len(vs) == 1 && vs[0] == "":
		return "", Missing
	case len(vs) > 1 || len(vs[0]) > MaxHeaderLen:
		return "", Malformed
	default:
		return vs[0], ""
	}
}

// unixSeconds reads a timestamp written as unix seconds, in canonical
// form (digits, no sign or leading zero), as it is signed.
func unixSeconds(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 1e18 || strconv.FormatInt(n, 10) != s {
		return 0, false
	}
	return n, true
}

// hashes are the hmac scheme's algorithms.
var hashes = map[string]func() hash.Hash{"sha256": sha256.New, "sha512": sha512.New}

// dot separates the parts of a signed message.
var dot = []byte(".")
