package keying

import "strconv"

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
