package caddymodule

import (
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/problem"
)

// outcomeSignature: the route's signature check refused the request.
const outcomeSignature = "signature_invalid"

// verifySignature checks the request's signature on a route with
// `signature:` (rt.sig), before anything of the request is keyed or claimed: a
// delivery nobody signed cannot take a genuine event's id. It returns the
// scope the request's key is hashed with (the verified sender's on a
// route whose scope is its sender) and, for a request that fails, the
// decision that refuses it. The answer never says which part failed; the
// metric's reason does.
func (h *Handler) verifySignature(g *guarded, r *http.Request, body []byte) (scope [32]byte, refused *decision) {
	rt := g.rt
	var signed string
	if rt.sig.NeedsURL() {
		signed = signedURL(rt.Signature.URL, r)
	}
	sender, reason, ok := rt.sig.CheckSignatureURL(r.Header, signed, body, time.Now())
	if !ok {
		h.metrics.SignatureFailures.WithLabelValues(rt.Name, string(reason)).Inc()
		g.note = "signature " + string(reason)
		p := problem.Signature.With("the request's signature could not be verified; nothing was claimed or forwarded", rt.Name)
		return scope, &decision{kind: decideProblem, would: metrics.WouldSignature, outcome: outcomeSignature, p: p}
	}
	if rt.ScopeSender {
		return keying.SenderScope(sender), nil
	}
	return keying.ScopeHash(rt.Scope, g.in), nil
}

// signedURL is the URL the sender posted r to, for a scheme that signs
// it (twilio, square): the route's configured public URL followed by
// the request's query, or else the URL rebuilt from the request as the
// client sent it (before any rewrite): its scheme and host from
// X-Forwarded-Proto and X-Forwarded-Host (their first values) when r
// comes from one of the server's trusted_proxies, else from the
// connection and the Host header.
func signedURL(public string, r *http.Request) string {
	or := r
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok {
		or = &orig
	}
	target := or.RequestURI
	if target == "" {
		target = or.URL.RequestURI()
	}
	if public != "" {
		if _, query, ok := strings.Cut(target, "?"); ok && query != "" {
			return public + "?" + query
		}
		return public
	}
	scheme, host := "http", or.Host
	if or.TLS != nil {
		scheme = "https"
	}
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); trusted {
		if p := firstValue(r.Header.Get("X-Forwarded-Proto")); p == "http" || p == "https" {
			scheme = p
		}
		if h := firstValue(r.Header.Get("X-Forwarded-Host")); h != "" {
			host = h
		}
	}
	return scheme + "://" + host + target
}

// firstValue is the first of a comma-separated header's values, trimmed.
func firstValue(v string) string {
	first, _, _ := strings.Cut(v, ",")
	return strings.TrimSpace(first)
}
