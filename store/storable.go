package store

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// unstoredHeaders are never replayed: hop-by-hop headers, and those the
// replaying server sets for itself (Alt-Svc is its own listeners', Date
// the time of its answer). Server and Via are stored: they say who
// answered (behind reverse_proxy the upstream's Server, or none, and
// Caddy's Via in place of Caddy's Server), and a replay says the same.
var unstoredHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Alt-Svc", "Date", "Content-Length", "Idempotent-Replayed",
}

var unstored = func() map[string]bool {
	m := make(map[string]bool, len(unstoredHeaders))
	for _, name := range unstoredHeaders {
		m[name] = true
	}
	return m
}()

// StorableHeader copies h without hop-by-hop and per-server headers (and
// those the Connection header lists), in one pass: the values of all kept
// names share one backing array, as in http.Header.Clone.
func StorableHeader(h http.Header) http.Header {
	var hop []string // names listed in Connection
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			hop = append(hop, textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)))
		}
	}
	keep := func(name string) bool { return !unstored[name] && !slices.Contains(hop, name) }
	n, names := 0, 0
	for name, vv := range h {
		if keep(name) {
			n += len(vv)
			names++
		}
	}
	out := make(http.Header, names)
	block := make([]string, n)
	for name, vv := range h {
		if !keep(name) {
			continue
		}
		if vv == nil {
			out[name] = nil
			continue
		}
		k := copy(block, vv)
		out[name] = block[:k:k]
		block = block[k:]
	}
	return out
}
