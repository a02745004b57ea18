package store

import (
	"net/http"
	"slices"
	"strings"
	"unsafe"
)

// The stored form of a result, the same on every engine: its header in
// HTTP wire format, and the result copied out of the caller's buffers with
// its header in that form (KeptResult).

// KeptResult copies a result out of the caller's buffers, with its header
// in the stored form every engine keeps.
func KeptResult(res Result) Result {
	res.Header = DecodeHeader(EncodeHeader(res.Header))
	if len(res.Body) == 0 {
		res.Body = nil
	} else {
		res.Body = slices.Clone(res.Body)
	}
	return res
}

// EncodeHeader writes h in the stored form every engine keeps, HTTP wire format, "Name: value\r\n" per value,
// names in sorted order. Names that cannot appear on the wire (empty or
// containing ':', CR or LF) are skipped; CR and LF inside values become
// spaces, as net/http does when it writes headers.
func EncodeHeader(h http.Header) string {
	b := AppendHeader(nil, h)
	// b is written once and never again: the string takes it over, as
	// strings.Builder does, with no copy.
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// AppendHeader appends EncodeHeader(h) to b, growing b at most once: an
// engine encodes a header straight into its write buffer.
func AppendHeader(b []byte, h http.Header) []byte {
	if len(h) == 0 {
		return b
	}
	names := make([]string, 0, len(h))
	size := 0
	for name, vv := range h {
		if name == "" || strings.ContainsAny(name, ":\r\n") {
			continue
		}
		names = append(names, name)
		for _, v := range vv {
			size += len(name) + len(v) + 4
		}
	}
	slices.Sort(names)
	b = slices.Grow(b, size)
	for _, name := range names {
		for _, v := range h[name] {
			b = append(b, name...)
			b = append(b, ": "...)
			start := len(b)
			b = append(b, v...)
			if strings.ContainsAny(v, "\r\n") {
				for i, c := range b[start:] {
					if c == '\r' || c == '\n' {
						b[start+i] = ' '
					}
				}
			}
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// DecodeHeader is the inverse of EncodeHeader; nil for "". Names are kept exactly as
// stored (no re-canonicalisation), values byte for byte. The values of one
// name share one backing array, as net/textproto does.
func DecodeHeader(s string) http.Header {
	if s == "" {
		return nil
	}
	n := strings.Count(s, "\r\n") + 1
	h := make(http.Header, n)
	values := make([]string, 0, n)
	start, prev := 0, ""
	for s != "" {
		line, rest, _ := strings.Cut(s, "\r\n")
		s = rest
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" {
			continue
		}
		if name != prev {
			setValues(h, prev, values[start:])
			start, prev = len(values), name
		}
		values = append(values, strings.TrimPrefix(value, " "))
	}
	setValues(h, prev, values[start:])
	return h
}

// setValues stores one run of values of name in h. The run is capped so that
// later appends never write into it.
func setValues(h http.Header, name string, run []string) {
	if name == "" {
		return
	}
	if old, ok := h[name]; ok { // the name appeared before (not written by EncodeHeader)
		h[name] = append(old[:len(old):len(old)], run...)
		return
	}
	h[name] = run[:len(run):len(run)]
}
