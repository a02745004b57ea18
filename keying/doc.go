// Package keying derives, from one HTTP request, the three values the
// idempotency gateway keys its records by: the idempotency key, the scope
// it is valid in, and the fingerprint of the payload. It has no Caddy or
// Redis dependencies; the request is described by an [Input].
//
// # Templates
//
// Keys and scopes are written as templates: literal text mixed with
// placeholders in braces.
//
//	{header.NAME}   first value of request header NAME (case-insensitive)
//	{query.NAME}    first value of query parameter NAME (case-sensitive)
//	{form.NAME}     first value of field NAME of an
//	                application/x-www-form-urlencoded body
//	{body.PATH}     value at PATH in the JSON request body; PATH is a
//	                gjson path (github.com/tidwall/gjson), e.g. event.id,
//	                items.0.sku, data.object.metadata.order_id
//
// For example "{body.event.id}:{body.event.type}" or
// "{header.Idempotency-Key}". Source names are lower case. Braces cannot be
// nested or escaped, so '{' and '}' are not allowed in literal text or
// names. Literal text must be visible ASCII (0x21..0x7E), like keys. A
// template of literal text only is valid and always resolves (a fixed
// scope, say). Placeholders written next to each other ("{body.a}{body.b}")
// are allowed, but a separator that cannot occur in the values avoids two
// different requests joining into the same key.
//
// A template resolves only when every placeholder has a non-empty value.
// A route lists several key templates and [DeriveKey] takes the first that
// resolves; [Template.Resolve] resolves one.
//
// A route's lookup URL (its verify rule) is a [URLTemplate]: the same
// request placeholders, each value URL-escaped, with {key}, {record_id} and
// {env.NAME} besides.
//
// Header values are trimmed of spaces and tabs. A value that is a Structured
// Field string (RFC 8941), such as "abc" with the double quotes, as the IETF
// Idempotency-Key draft defines the header, is unquoted (escapes decoded,
// parameters ignored); any other value, such as abc, is used as it is.
//
// Query and form values are URL-decoded with url.ParseQuery; form fields are
// read only when the Content-Type is application/x-www-form-urlencoded (the
// body is parsed by this package, never by http.Request.ParseForm).
//
// Body placeholders read the JSON body after canonicalization, so they agree
// with the fingerprint about duplicate keys (the last wins). A string gives
// its unescaped text, a number its text as written (1.50 stays "1.50"),
// true and false their names; objects, arrays, null and missing values do
// not resolve. An empty body does not resolve either; a body that is not
// valid JSON makes Resolve and DeriveKey fail with an error wrapping
// [ErrMalformedJSON], so the gateway answers 400 instead of guessing.
//
// # Keys
//
// [ValidateKey] accepts keys of 1 to 255 bytes of visible ASCII (0x21..0x7E).
// Keys are never used raw in store key names: [IDKey.KeyID] derives a
// 32-digit lowercase hex record id from the operation, the scope hash and
// the key with HMAC-SHA-256 under the deployment secret ([NewIDKey]),
//
//	hex(HMAC-SHA-256(secret, "idemgate-key-v2\x00" + operation + "\x00" + scope + "\x00" + key))[:32]
//
// which operators see in logs and the admin API, and the store puts in its
// key names. Without the secret nobody can test a guessed key or scope
// value (a Basic password in the Authorization header) against an id. The scope ([ScopeHash]) is the SHA-256 of the resolved scope
// templates (by default the Authorization header), so equal keys sent by
// different clients never meet; scope placeholders that do not resolve
// count as "".
//
// # Canonical JSON
//
// [Canonicalize] writes a JSON value in one canonical form, so that bodies
// that differ only in formatting have the same fingerprint:
//
//   - no insignificant white space;
//   - object members sorted by the byte order of their unescaped keys;
//   - a key repeated in one object keeps only its last value;
//   - strings re-escaped one way: '"' and '\' as \" and \\, the control
//     characters \b \f \n \r \t by their short escapes, other control
//     characters as \u00xx (lowercase hex), every other character as
//     literal UTF-8 (so "\u0041", "\/" and "A", "/" are equal; bytes that
//     are not valid UTF-8 are kept, and escaped lone surrogates become
//     U+FFFD as gjson decodes them);
//   - numbers exactly as written (1, 1.0 and 1e0 differ);
//   - true, false, null as they are; array order is kept.
//
// Documents nested deeper than [MaxDepth] are rejected with [ErrTooDeep],
// which also matches [ErrMalformedJSON]. The depth is checked first, in one
// linear pass with constant stack (brackets inside strings do not count),
// before any recursive parser reads the document; a fingerprint never falls
// back to the raw bytes of such a body.
//
// # Fingerprints
//
// The fingerprint tells a retry (same key, same payload) from a conflicting
// reuse of a key (same key, different payload). [Fingerprint] is the
// lowercase hex SHA-256 of
//
//	"idemgate-fp-v1\x00" + method + "\x00" + operation + "\x00" + body
//
// where body is the canonical JSON body, "" for an empty body, or the raw
// bytes of a body that is not JSON. A [FingerprintRule] narrows it: Ignore
// paths (say meta.delivery_attempt) are deleted first, and when Body paths
// are given only those fields count, as the canonical object
// {"path":value,...} sorted by path, with null for a missing field. A rule
// that selects or ignores fields needs a JSON body. [FingerprintRule.Encode]
// gives the rule's stable text, stored with each record, so a record made
// under an older rule can be recognised after a reload.
package keying
