package config

import (
	"net/textproto"
	"regexp"
	"strings"
)

// A verify rule's lookup URL is stored on the record and shown to
// operators, and its match values are stored with it: neither may copy
// the caller's credentials. callerCredentials knows which placeholders
// do, by name (the request's Authorization, Proxy-Authorization and
// Cookie headers, any cookie, a header, parameter or field named like a
// credential) and by the route's scope, which names what identifies the
// caller (an X-Api-Key header, a tenant parameter).

// placeholderRE matches a placeholder: a '{' up to the next '}'.
var placeholderRE = regexp.MustCompile(`\{([^{}]*)\}`)

// credentialHeaders are the request headers that carry the caller's
// credentials whatever the route's scope.
var credentialHeaders = map[string]string{
	"Authorization":       "the Authorization header",
	"Proxy-Authorization": "the Proxy-Authorization header",
	"Cookie":              "the Cookie header",
}

// credentialWords are the fragments of a name (lower case, '-' and '_'
// removed) that mark it as a credential: access_token, X-Auth-Token,
// client_secret, X-Api-Key, password, pwd, accessKeyId, client_assertion,
// session_id.
var credentialWords = []string{"token", "secret", "passw", "pwd", "passphrase", "apikey", "accesskey", "privatekey", "assertion", "cookie", "session", "credential", "signature", "jwt", "auth"}

// callerCredentials are the placeholders that copy a caller's credentials
// on one route.
type callerCredentials struct {
	scope map[string]bool // the route's scope placeholders, normalised (see normalPlaceholder)
}

func newCallerCredentials(scope []string) callerCredentials {
	c := callerCredentials{scope: map[string]bool{}}
	for _, t := range scope {
		for _, m := range placeholderRE.FindAllStringSubmatch(t, -1) {
			if src, name, ok := normalPlaceholder(m[1]); ok {
				c.scope[src+"."+name] = true
			}
		}
	}
	return c
}

// leak is a placeholder that copies the caller's credentials, and why.
type leak struct{ name, why string }

// in lists the placeholders of template t that copy the caller's
// credentials, in order.
func (c callerCredentials) in(t string) []leak {
	var out []leak
	for _, m := range placeholderRE.FindAllStringSubmatch(t, -1) {
		if why := c.why(m[1]); why != "" {
			out = append(out, leak{m[1], why})
		}
	}
	return out
}

// why says why placeholder p (the text between its braces) copies the
// caller's credentials, or "" when it does not.
func (c callerCredentials) why(p string) string {
	src, name, ok := normalPlaceholder(p)
	switch {
	case !ok:
		return ""
	case src == "cookie":
		return "a cookie"
	case src == "header" && credentialHeaders[name] != "":
		return credentialHeaders[name]
	case c.scope[src+"."+name]:
		return "the route's scope uses it"
	case credentialName(name):
		return "its name says so"
	}
	return ""
}

// normalPlaceholder reads a request placeholder, as the gateway writes
// it ({header.NAME}, {query.NAME}, {form.NAME}, {body.PATH}) or as Caddy
// does ({http.request.header.NAME}, {http.request.cookie.NAME},
// {http.request.uri.query.NAME}; {cookie.NAME}): its source and name,
// header names canonical. ok is false for anything else.
func normalPlaceholder(p string) (src, name string, ok bool) {
	p = strings.TrimPrefix(p, "http.request.")
	if rest, found := strings.CutPrefix(p, "uri.query."); found {
		p = "query." + rest
	}
	src, name, ok = strings.Cut(p, ".")
	switch {
	case !ok || name == "":
		return "", "", false
	case src == "header":
		return src, textproto.CanonicalMIMEHeaderKey(name), true
	case src == "query", src == "form", src == "body", src == "cookie":
		return src, name, true
	}
	return "", "", false
}

// credentialName reports whether a header, parameter or field called
// name (for a body path, its last element) is named like a credential.
func credentialName(name string) bool {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	n := strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(name))
	if strings.Contains(n, "author") && !strings.Contains(n, "authoriz") {
		n = strings.ReplaceAll(n, "author", "") // an author is no credential
	}
	for _, w := range credentialWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
