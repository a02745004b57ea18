package keying

import (
	"net/url"
	"slices"
	"strings"
)

// SetTarget sets the request target that the fingerprint covers besides
// the query: what the route's path pattern matched with its wildcards (for
// /orders/*/refund, the order segment), "" for a literal pattern. Two
// routes that share an operation under different literal paths therefore
// give one request the same fingerprint.
func (in *Input) SetTarget(target string) { in.target = target }

// AppendCanonicalQuery appends the canonical form of a raw query string:
// its parameters decoded, sorted by name and then value, and encoded again
// as name=value pairs joined by '&' (empty pairs dropped; a pair that does
// not decode is kept as it was written). So ?b=2&a=1 and ?a=1&b=%32 are
// the same query, and ?a=5 and ?a=500 are not.
func AppendCanonicalQuery(dst []byte, rawQuery string) []byte {
	type pair struct{ k, v string }
	var stack [8]pair
	pairs := stack[:0]
	for part := range strings.SplitSeq(rawQuery, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if dv, err := url.QueryUnescape(v); err == nil {
			v = dv
		}
		pairs = append(pairs, pair{k, v})
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := strings.Compare(a.k, b.k); c != 0 {
			return c
		}
		return strings.Compare(a.v, b.v)
	})
	for i, p := range pairs {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, url.QueryEscape(p.k)...)
		dst = append(dst, '=')
		dst = append(dst, url.QueryEscape(p.v)...)
	}
	return dst
}
