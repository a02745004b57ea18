package keying

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/tidwall/gjson"
)

// ErrMalformedJSON is wrapped by every error about a request body (or a value
// given to Canonicalize) that is not valid JSON, or that nests deeper than
// MaxDepth (ErrTooDeep).
var ErrMalformedJSON = errors.New("request body is not valid JSON")

// MaxDepth is the deepest nesting of objects and arrays that Canonicalize
// (and so every body placeholder and Fingerprint) accepts. Deeper documents
// are rejected with ErrTooDeep, found in one linear pass before any
// recursive parser sees them. The bound also keeps the work per request
// linear in practice: each nesting level re-scans its contents once.
const MaxDepth = 128

// errInvalid is returned for documents gjson does not accept as valid.
var errInvalid = fmt.Errorf("%w: syntax error", ErrMalformedJSON)

// json parses the body once and returns its canonical form.
// It returns ("", nil) for an empty body.
func (in *Input) json() (string, error) {
	if in.state == bodyUnknown {
		in.parseJSON()
	}
	switch in.state {
	case bodyJSON:
		return in.canon, nil
	case bodyInvalid:
		return "", in.jsonErr
	}
	return "", nil
}

func (in *Input) parseJSON() {
	if isBlank(in.body) {
		in.state = bodyEmpty
		return
	}
	// Depth first, in one pass with constant stack: gjson.Valid and the
	// canonicalizer recurse once per nesting level.
	if err := checkDepth(in.body); err != nil {
		in.state, in.jsonErr = bodyInvalid, err
		return
	}
	s := bytesToString(in.body)
	if !gjson.Valid(s) {
		in.state, in.jsonErr = bodyInvalid, errInvalid
		return
	}
	// The canonical form is never longer than the input: white space is
	// dropped and canonical escapes are never longer than the ones replaced.
	buf, err := canonicalizeValid(make([]byte, 0, len(in.body)), s)
	if err != nil {
		in.state, in.jsonErr = bodyInvalid, err
		return
	}
	// buf is owned by in and never written again, so it can back a string.
	in.state, in.canon = bodyJSON, bytesToString(buf)
}

// ErrTooDeep is wrapped by the error about a request body (or a value given
// to Canonicalize) that nests arrays and objects deeper than MaxDepth. It
// matches ErrMalformedJSON too (errors.Is), so callers that only ask
// whether a body is usable JSON need not tell the two apart.
var ErrTooDeep error = tooDeepError{}

type tooDeepError struct{}

func (tooDeepError) Error() string {
	return "JSON nests arrays and objects deeper than " + strconv.Itoa(MaxDepth) + " levels"
}

// Is makes errors.Is(ErrTooDeep, ErrMalformedJSON) true.
func (tooDeepError) Is(target error) bool { return target == ErrMalformedJSON }

// Byte classes outside JSON strings, for checkDepth.
const (
	classStop  = iota // no JSON text has this byte outside a string
	classPlain        // white space, , : and the bytes of numbers, true, false, null
	classOpen         // [ {
	classClose        // ] }
	classQuote        // "
)

var jsonClass = func() (t [256]uint8) {
	for _, c := range []byte(" \t\r\n,:0123456789+-.eEtruefalsn") {
		t[c] = classPlain
	}
	t['['], t['{'] = classOpen, classOpen
	t[']'], t['}'] = classClose, classClose
	t['"'] = classQuote
	return t
}()

// CheckDepth returns ErrTooDeep when b nests arrays and objects deeper
// than MaxDepth, as checkDepth: for JSON from elsewhere (a verification
// lookup's answer) before gjson reads it.
func CheckDepth(b []byte) error { return checkDepth(b) }

// checkDepth returns ErrTooDeep when b nests arrays and objects deeper than
// MaxDepth, and nil otherwise. It is one pass over b with a counter, in
// constant stack, and must run before anything recursive (gjson) reads a
// body: gjson.Valid recurses once per level, so a body of a million '['
// needs hundreds of MiB of stack and 64 MiB of them overflows Go's stack,
// which kills the process.
//
// Brackets inside strings do not count; a string ends at the first '"'
// not escaped by an odd run of backslashes. The scan stops, returning nil,
// at the first byte that no JSON text has outside a string (a letter other
// than those of true, false and null, a control character, any non-ASCII
// byte), at a closing bracket with nothing open, or at a string that never
// ends: what follows is not JSON, and no parser reads beyond it, so a
// binary or text body is not refused for the brackets it happens to hold.
// Where b is JSON (or its beginning is) the depth counted is exactly its
// nesting.
func checkDepth(b []byte) error {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch jsonClass[b[i]] {
		case classPlain:
		case classOpen:
			if depth++; depth > MaxDepth {
				return ErrTooDeep
			}
		case classClose:
			if depth--; depth < 0 {
				return nil
			}
		case classQuote:
			var ok bool
			if i, ok = stringEnd(b, i+1); !ok {
				return nil
			}
		default:
			return nil
		}
	}
	return nil
}

// stringEnd returns the index of the '"' that ends the JSON string whose
// contents start at b[start], and false when the string does not end. A
// backslash escapes the byte after it, whatever that is.
func stringEnd(b []byte, start int) (int, bool) {
	for i := start; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i, true
		case '\\':
			i++
		}
	}
	return 0, false
}

// Canonicalize appends the canonical form of the JSON value json to dst and
// returns the extended buffer. json is not retained or modified. When json is
// not valid JSON it returns dst unchanged and an error wrapping
// ErrMalformedJSON; when it nests deeper than MaxDepth, ErrTooDeep.
//
// The canonical form has no insignificant white space; object members are
// sorted by the byte order of their unescaped keys; when a key occurs more
// than once in one object only its last value is kept (as most JSON parsers
// do); strings are re-escaped canonically (see the package documentation),
// so "\u0041" and "A" are equal; numbers are kept exactly as written (1.0 and
// 1 differ); true, false and null are unchanged. Array order is kept.
// The canonical form is itself valid JSON and canonical.
func Canonicalize(dst, json []byte) ([]byte, error) {
	if err := checkDepth(json); err != nil {
		return dst, err
	}
	s := bytesToString(json)
	if !gjson.Valid(s) {
		return dst, errInvalid
	}
	c := getCanonicalizer()
	defer putCanonicalizer(c)
	out, err := c.value(dst, gjson.Parse(s), 0)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// canonicalizeValid is Canonicalize for input already known to be valid
// (and checked by checkDepth).
func canonicalizeValid(dst []byte, s string) ([]byte, error) {
	c := getCanonicalizer()
	defer putCanonicalizer(c)
	return c.value(dst, gjson.Parse(s), 0)
}

// member is one object member waiting to be sorted.
type member struct {
	key string // unescaped key
	// rawKey is the key's raw JSON text (with quotes) when it has no escapes,
	// so it can be copied as is; "" otherwise.
	rawKey string
	val    gjson.Result
}

// canonicalizer holds the scratch stacks of object members shared by all
// nesting levels of one call, so that sorting needs no allocation per object.
type canonicalizer struct {
	members []member
	// order is the sort order of the members of the objects being written:
	// small entries (a key and its member's index), so sorting moves
	// little memory.
	order []memberRef
	err   error
}

// memberRef is one entry of canonicalizer.order.
type memberRef struct {
	key string // the member's unescaped key
	i   int    // its index in canonicalizer.members
}

var canonicalizerPool = sync.Pool{New: func() any { return new(canonicalizer) }}

func getCanonicalizer() *canonicalizer { return canonicalizerPool.Get().(*canonicalizer) }

func putCanonicalizer(c *canonicalizer) {
	if cap(c.members) > 1024 {
		c.members, c.order = nil, nil // do not pin huge buffers
	}
	clear(c.members[:cap(c.members)]) // drop references to the document
	clear(c.order[:cap(c.order)])
	c.members, c.order = c.members[:0], c.order[:0]
	c.err = nil
	canonicalizerPool.Put(c)
}

// value appends the canonical form of the valid JSON value v.
func (c *canonicalizer) value(dst []byte, v gjson.Result, depth int) ([]byte, error) {
	switch v.Type {
	case gjson.String:
		if strings.IndexByte(v.Raw, '\\') < 0 {
			// Without escapes a valid JSON string is already canonical.
			return append(dst, v.Raw...), nil
		}
		return appendString(dst, v.Str), nil
	case gjson.JSON:
		if depth >= MaxDepth {
			return dst, ErrTooDeep // checkDepth has refused such input already
		}
		if v.Raw[0] == '{' {
			return c.object(dst, v, depth+1)
		}
		return c.array(dst, v, depth+1)
	case gjson.Null, gjson.False, gjson.True, gjson.Number:
		// As written.
		return append(dst, v.Raw...), nil
	}
	return dst, errInvalid
}

func (c *canonicalizer) array(dst []byte, v gjson.Result, depth int) ([]byte, error) {
	dst = append(dst, '[')
	first := true
	v.ForEach(func(_, e gjson.Result) bool {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst, c.err = c.value(dst, e, depth)
		return c.err == nil
	})
	if c.err != nil {
		return dst, c.err
	}
	return append(dst, ']'), nil
}

func (c *canonicalizer) object(dst []byte, v gjson.Result, depth int) ([]byte, error) {
	start, ostart := len(c.members), len(c.order)
	v.ForEach(func(k, e gjson.Result) bool {
		m := member{key: k.Str, val: e}
		if strings.IndexByte(k.Raw, '\\') < 0 {
			m.rawKey = k.Raw
		}
		c.order = append(c.order, memberRef{key: m.key, i: len(c.members)})
		c.members = append(c.members, m)
		return true
	})
	oend := len(c.order)
	// A stable sort keeps duplicate keys in document order, so the last
	// of each run of equal keys is the one that wins.
	order := c.order[ostart:oend]
	if !slices.IsSortedFunc(order, compareRefs) {
		slices.SortStableFunc(order, compareRefs)
	}
	dst = append(dst, '{')
	first := true
	var err error
	for j := ostart; j < oend; j++ {
		// Index c.order and c.members afresh: nested objects may grow
		// (and move) them.
		ref := c.order[j]
		if j+1 < oend && c.order[j+1].key == ref.key {
			continue // a later duplicate wins
		}
		m := c.members[ref.i]
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if m.rawKey != "" {
			dst = append(dst, m.rawKey...)
		} else {
			dst = appendString(dst, m.key)
		}
		dst = append(dst, ':')
		if dst, err = c.value(dst, m.val, depth); err != nil {
			break
		}
	}
	c.members, c.order = c.members[:start], c.order[:ostart]
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

func compareRefs(a, b memberRef) int { return strings.Compare(a.key, b.key) }

const hexDigits = "0123456789abcdef"

// appendString appends s as a canonical JSON string: '"' and '\' are
// escaped with a backslash; \b \f \n \r \t use their short escapes; other
// control characters below 0x20 use \u00xx with lowercase hex; every other
// byte, including non-ASCII UTF-8, DEL and bytes that are not valid UTF-8,
// is copied unchanged.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// bytesToString returns b as a string without copying. The caller must not
// modify b while the string is in use.
func bytesToString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// stringToBytes returns s as a byte slice without copying. The result must
// not be modified.
func stringToBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// isJSONSpace reports whether c is JSON insignificant white space.
func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// isBlank reports whether b is empty or only JSON white space.
func isBlank(b []byte) bool {
	for _, c := range b {
		if !isJSONSpace(c) {
			return false
		}
	}
	return true
}
