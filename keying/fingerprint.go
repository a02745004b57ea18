package keying

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// FingerprintRule selects (Body) and drops (Ignore) JSON fields of the
// request body, named by gjson paths, before the body is fingerprinted.
// The zero rule fingerprints the whole canonical body.
//
// Body paths may use any gjson path syntax. Ignore paths are deleted with
// sjson, so they must use the simpler sjson path syntax (keys, array
// indexes, escaped dots; no queries or modifiers); see Validate.
type FingerprintRule struct {
	Body   []string `json:"body,omitempty"`
	Ignore []string `json:"ignore,omitempty"`
	// IgnoreQuery leaves the query string out of the fingerprint (the
	// route's `fingerprint.query: false`); by default its parameters,
	// sorted, count.
	IgnoreQuery bool `json:"ignore_query,omitempty"`
}

// IsZero reports whether the rule neither selects nor ignores any field, so
// the whole canonical body is fingerprinted.
func (r FingerprintRule) IsZero() bool {
	return len(r.Body) == 0 && len(r.Ignore) == 0 && !r.IgnoreQuery
}

// selectsBody reports whether the rule selects or ignores body fields (so
// the body must be JSON).
func (r FingerprintRule) selectsBody() bool { return len(r.Body) != 0 || len(r.Ignore) != 0 }

// Validate checks the rule's paths: none may be empty, and every Ignore path
// must be one sjson can delete (no queries, wildcards, modifiers or multipaths).
func (r FingerprintRule) Validate() error {
	for i, p := range r.Body {
		if p == "" {
			return fmt.Errorf("fingerprint body[%d]: empty path", i)
		}
	}
	for i, p := range r.Ignore {
		if p == "" {
			return fmt.Errorf("fingerprint ignore[%d]: empty path", i)
		}
		if _, err := sjson.Delete(`{}`, p); err != nil {
			return fmt.Errorf("fingerprint ignore[%d]: path %q cannot be deleted: %v", i, p, err)
		}
	}
	return nil
}

// normalized returns the rule with each list sorted and without duplicates.
// Neither the order nor repeats of paths change a fingerprint, so rules that
// differ only in them encode alike.
func (r FingerprintRule) normalized() FingerprintRule {
	norm := func(s []string) []string {
		if len(s) == 0 {
			return nil
		}
		s = slices.Clone(s)
		slices.Sort(s)
		return slices.Compact(s)
	}
	return FingerprintRule{Body: norm(r.Body), Ignore: norm(r.Ignore), IgnoreQuery: r.IgnoreQuery}
}

// Encode returns a compact, stable text form of the rule, stored with each
// record so a later rule change is recognised: "" for the zero rule, else a
// JSON object such as {"body":["amount","currency"],"ignore":["meta.ts"]}
// with each list sorted and deduplicated.
func (r FingerprintRule) Encode() string {
	if r.IsZero() {
		return ""
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r.normalized()); err != nil {
		// A struct of string slices always encodes.
		panic("keying: encoding fingerprint rule: " + err.Error())
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ParseFingerprintRule is the inverse of Encode: "" gives the zero rule.
// The result is normalized (lists sorted and deduplicated) and validated.
func ParseFingerprintRule(s string) (FingerprintRule, error) {
	if s == "" {
		return FingerprintRule{}, nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var r FingerprintRule
	if err := dec.Decode(&r); err != nil {
		return FingerprintRule{}, fmt.Errorf("fingerprint rule %q: %w", s, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return FingerprintRule{}, fmt.Errorf("fingerprint rule %q: trailing data", s)
	}
	if err := r.Validate(); err != nil {
		return FingerprintRule{}, err
	}
	return r.normalized(), nil
}

const fpDomain = "idemgate-fp-v2\x00"

// fpScratch is the per-call state of Fingerprint, pooled.
type fpScratch struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

var fpPool = sync.Pool{New: func() any { return &fpScratch{h: sha256.New()} }}

// Fingerprint returns the lowercase hex SHA-256 over
//
//	"idemgate-fp-v2\x00" + method + "\x00" + operation + "\x00" +
//	len32(target) + target + len32(query) + query + body
//
// where len32 is a length as 4 big-endian bytes; target is the Input's
// target (what the route's path wildcards matched, see Input.SetTarget);
// query is the canonical query string (see CanonicalQuery), or "" when
// rule.IgnoreQuery; and body is: "" for an empty (or all white space) request body; the
// canonical JSON when the body is valid JSON, after rule.Ignore paths are
// deleted and, when rule.Body is set, reduced to a canonical object mapping
// each selected path to its value ({"path":value,...} sorted by path, null
// when missing); the raw bytes when the body is not JSON and the rule is
// zero. When the body is not JSON and the rule selects or ignores fields,
// it returns an error wrapping ErrMalformedJSON. A body nesting deeper than
// MaxDepth is always refused, with ErrTooDeep: its raw bytes are not
// fingerprinted instead.
//
// Ignore paths refer to the original document: they are deleted from the
// last position to the first, so "items.0" and "items.1" drop the first two
// items whatever their order in the rule.
func Fingerprint(method, operation string, in *Input, rule FingerprintRule) (string, error) {
	doc, err := in.json()
	raw := false
	switch {
	case err != nil && !rule.selectsBody() && !errors.Is(err, ErrTooDeep):
		raw, err = true, nil
	case err != nil:
		return "", fmt.Errorf("fingerprint: %w", err)
	}

	s := fpPool.Get().(*fpScratch)
	defer func() {
		if cap(s.buf) > 64<<10 {
			s.buf = nil
		}
		fpPool.Put(s)
	}()
	s.h.Reset()
	s.buf = append(s.buf[:0], fpDomain...)
	s.buf = append(s.buf, method...)
	s.buf = append(s.buf, 0)
	s.buf = append(s.buf, operation...)
	s.buf = append(s.buf, 0)
	s.buf = appendLen32(s.buf, in.target)
	if rule.IgnoreQuery || in.rawQuery == "" {
		s.buf = append(s.buf, 0, 0, 0, 0)
	} else {
		at := len(s.buf)
		s.buf = append(s.buf, 0, 0, 0, 0)
		s.buf = AppendCanonicalQuery(s.buf, in.rawQuery)
		binary.BigEndian.PutUint32(s.buf[at:], uint32(len(s.buf)-at-4))
	}
	s.h.Write(s.buf)

	switch {
	case raw:
		s.h.Write(in.body)
	case doc == "" || !rule.selectsBody():
		s.h.Write(stringToBytes(doc))
	default:
		if doc, err = applyIgnore(doc, rule.Ignore); err != nil {
			return "", err
		}
		if len(rule.Body) == 0 {
			s.h.Write(stringToBytes(doc))
			break
		}
		if s.buf, err = appendSelection(s.buf[:0], doc, rule.Body); err != nil {
			return "", err
		}
		s.h.Write(s.buf)
	}
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], s.h.Sum(s.sum[:0]))
	return string(out[:]), nil
}

// applyIgnore deletes the ignore paths from the canonical document doc.
func applyIgnore(doc string, ignore []string) (string, error) {
	if len(ignore) == 0 {
		return doc, nil
	}
	type hit struct {
		pos  int
		path string
	}
	var stack [8]hit
	hits := stack[:0]
	for _, p := range ignore {
		r := gjson.Get(doc, p)
		if !r.Exists() {
			continue
		}
		hits = append(hits, hit{r.Index, p})
	}
	// Last position first, so earlier array indexes do not shift.
	slices.SortFunc(hits, func(a, b hit) int {
		if a.pos != b.pos {
			return b.pos - a.pos
		}
		return strings.Compare(a.path, b.path)
	})
	var err error
	for i, h := range hits {
		if i > 0 && h.pos == hits[i-1].pos && h.path == hits[i-1].path {
			continue
		}
		if doc, err = sjson.Delete(doc, h.path); err != nil {
			return "", fmt.Errorf("fingerprint ignore path %q: %w", h.path, err)
		}
	}
	return doc, nil
}

// appendSelection appends the canonical object {"path":value,...} of the
// selected paths (sorted, deduplicated; missing values are null).
func appendSelection(dst []byte, doc string, paths []string) ([]byte, error) {
	if !slices.IsSorted(paths) {
		paths = slices.Clone(paths)
		slices.Sort(paths)
	}
	dst = append(dst, '{')
	var err error
	for i, p := range paths {
		if i > 0 && p == paths[i-1] {
			continue
		}
		if len(dst) > 1 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, p)
		dst = append(dst, ':')
		r := gjson.Get(doc, p)
		if !r.Exists() || r.Raw == "" {
			dst = append(dst, "null"...)
			continue
		}
		// Values of plain paths are canonical already; results built by
		// queries or modifiers may not be, so canonicalize them again.
		if dst, err = Canonicalize(dst, stringToBytes(r.Raw)); err != nil {
			return dst, fmt.Errorf("fingerprint body path %q: %w", p, err)
		}
	}
	return append(dst, '}'), nil
}

// appendLen32 appends s prefixed with its length as 4 big-endian bytes.
func appendLen32(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}
