package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// Load reads a YAML rules file and returns its validated rules. Problems
// are an ErrorList whose entries name the file, line and field:
//
//	routes.yaml:9: routes[1].on_unknown_outcome: "maybe" is not one of hold, release, store
//
// An error reading the file is returned as it is (an *fs.PathError).
func Load(path string) (*Rules, error) { return LoadWith(path, Limits{}) }

// LoadWith is Load, also checking the rules against l.
func LoadWith(path string, l Limits) (*Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseWith(path, data, l)
}

// Parse decodes YAML rules from data and validates them, like Load; name
// is the file name used in error messages.
//
// The rules are decoded with spf13/viper (UnmarshalExact, so unknown
// fields are errors) and decode hooks for Duration and Size, and checked
// with Validate. Field names are lower-case snake_case; each may be set
// once per mapping. YAML anchors, aliases and merge keys ("<<: *common")
// are allowed. The document must hold a single mapping.
func Parse(name string, data []byte) (*Rules, error) { return ParseWith(name, data, Limits{}) }

// ParseWith is Parse, also checking the rules against l.
func ParseWith(name string, data []byte, l Limits) (*Rules, error) {
	r, errs := parse(data, l)
	if len(errs) == 0 {
		return r, nil
	}
	for _, e := range errs {
		e.File = name
	}
	slices.SortStableFunc(errs, func(a, b *Error) int { return a.Line - b.Line })
	if len(errs) > maxErrors {
		more := &Error{File: name, Line: max(errs[maxErrors].Line, 1),
			Msg: fmt.Sprintf("and %d more problems", len(errs)-maxErrors)}
		errs = append(errs[:maxErrors:maxErrors], more)
	}
	return nil, errs
}

// maxErrors is how many problems Parse reports at most; the rest are
// counted in one last entry.
const maxErrors = 100

// parse does the work of Parse; its errors have lines but no file name.
func parse(data []byte, l Limits) (*Rules, ErrorList) {
	x, errs := parseNodes(data)
	if len(errs) > 0 {
		return nil, errs
	}
	if x.root != nil {
		lint(x.root, "", &errs)
		if len(errs) > 0 {
			return nil, errs
		}
	}

	// The key delimiter is one no YAML key of ours contains, so that a key
	// like "match.path" is an unknown field rather than a nested one.
	v := viper.NewWithOptions(viper.KeyDelimiter("\x00"))
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, yamlErrors(err, data)
	}
	var r Rules
	if err := v.UnmarshalExact(&r, decoderConfig); err != nil {
		errs = x.decodeErrors(err)
	}

	// Validate what did decode, so that one run reports every problem; a
	// field that failed to decode is left zero, so skip what its failure
	// would make Validate report again ("name: is required").
	failed := newFieldSet(errs)
	for _, e := range append(x.explicitEmpty(&r), r.check(l, false)...) {
		if !failed.related(e.Field) {
			e.Line = x.line(e.Field)
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &r, nil
}

// fieldSet holds the fields of some errors, to find later errors about the
// same fields, fields inside them, or fields they are inside.
type fieldSet struct {
	fields  map[string]bool // the fields
	parents map[string]bool // every field that holds one of them
}

func newFieldSet(errs ErrorList) fieldSet {
	s := fieldSet{fields: make(map[string]bool, len(errs)), parents: make(map[string]bool)}
	for _, e := range errs {
		s.fields[e.Field] = true
		for p := e.Field; p != ""; {
			p = parentField(p)
			s.parents[p] = true
		}
	}
	return s
}

// related reports whether field is in the set, inside one of its fields,
// or holds one of them.
func (s fieldSet) related(field string) bool {
	if len(s.fields) == 0 {
		return false
	}
	if s.parents[field] {
		return true
	}
	for p := field; ; p = parentField(p) {
		if s.fields[p] {
			return true
		}
		if p == "" {
			return false
		}
	}
}

// parentField returns the field holding field: "routes[1]" for
// "routes[1].ttl", "routes" for "routes[1]", "" for "routes".
func parentField(field string) string {
	i := strings.LastIndexAny(field, ".[")
	if i < 0 {
		return ""
	}
	return field[:i]
}

// parseNodes parses data into a yaml.Node tree for line lookups. It
// reports syntax errors, a document that is not a mapping, and extra
// documents.
func parseNodes(data []byte) (*docIndex, ErrorList) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &docIndex{}, nil
		}
		return nil, yamlErrors(err, data)
	}
	x := &docIndex{}
	if len(doc.Content) > 0 {
		root := doc.Content[0]
		switch {
		case root.Kind == yaml.MappingNode:
			x.root = root
		case root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null":
			// An empty document: no rules.
		default:
			return nil, ErrorList{{Line: root.Line,
				Msg: "the rules must be a mapping with defaults and routes, not " + describeNode(root)}}
		}
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, yamlErrors(err, data)
	default:
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return nil, ErrorList{{Line: line,
			Msg: "a second YAML document; the rules must be one document"}}
	}
	return x, nil
}

var yamlLineRE = regexp.MustCompile(`^line (\d+): `)

// yamlErrors converts a go.yaml.in/yaml/v3 error (possibly wrapped by
// viper) into located errors. The YAML library leaves out the line of
// problems on the first line, so a missing line means line 1, except for
// encoding problems, which are located here.
func yamlErrors(err error, data []byte) ErrorList {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		var pe viper.ConfigParseError
		if errors.As(err, &pe) {
			err = pe.Unwrap()
		}
		msgs = []string{err.Error()}
	}
	var list ErrorList
	for _, msg := range msgs {
		msg = strings.TrimPrefix(msg, "yaml: ")
		line := 0
		if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = msg[len(m[0]):]
		}
		switch {
		case parserProblems[msg]:
			// The parser (unlike the scanner) reports 0-based lines, and
			// leaves out line 0.
			line++
		case line > 0:
		case anchorRE.MatchString(msg):
			m := anchorRE.FindStringSubmatch(msg)
			line = tokenLine(data, m[1], m[2])
		default:
			line = badByteLine(data)
		}
		list = append(list, &Error{Line: line, Msg: "invalid YAML: " + msg})
	}
	return list
}

// anchorRE matches the YAML errors about an alias or anchor, which carry
// no line: the line is where "*name" (or "&name") is first written.
var anchorRE = regexp.MustCompile(`^(?:unknown anchor '(.+)' referenced|anchor '(.+)' value contains itself)$`)

// tokenLine returns the line of the first "*alias", or else of the first
// "&anchor", in data; 1 when neither is found.
func tokenLine(data []byte, alias, anchor string) int {
	tok := "*" + alias
	if alias == "" {
		tok = "&" + anchor
	}
	if i := bytes.Index(data, []byte(tok)); i >= 0 {
		return lineAt(data, i)
	}
	return 1
}

// lineAt returns the 1-based line of byte offset off in data, counting
// line breaks as YAML does: LF, CR, CR LF, and NEL, LS and PS.
func lineAt(data []byte, off int) int {
	line := 1
	for i := 0; i < off && i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch r {
		case '\r':
			if i+1 < len(data) && data[i+1] == '\n' {
				size = 2
			}
			line++
		case '\n', '\u0085', '\u2028', '\u2029':
			line++
		}
		i += size
	}
	return line
}

// parserProblems are the messages of go.yaml.in/yaml/v3's parser errors
// (parserc.go), whose line numbers are 0-based; scanner errors are 1-based.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected key":              true,
	"did not find expected '-' indicator":    true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// badByteLine returns the line of the first byte YAML rejects outright
// (invalid UTF-8 or a control character), or 1.
func badByteLine(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1,
			r < 0x20 && r != '\t' && r != '\r' && r != '\n', r == 0x7f:
			return lineAt(data, i)
		}
		i += size
	}
	return 1
}

// decoderConfig adjusts viper's mapstructure settings: our own decode hook
// (Duration, Size) instead of viper's default, and no weak typing, so that
// `require_key: "yes"` or `methods: POST` is an error instead of a guess.
func decoderConfig(c *mapstructure.DecoderConfig) {
	c.DecodeHook = mapstructure.DecodeHookFuncType(decodeHook)
	c.WeaklyTypedInput = false
}

// hookError is a decode problem found by decodeHook; its message is meant
// for the user as it is.
type hookError struct{ msg string }

func (e *hookError) Error() string { return e.msg }

const zeroHint = " (leave the field out to inherit the default)"

var (
	durationType = reflect.TypeFor[Duration]()
	sizeType     = reflect.TypeFor[Size]()
)

// decodeHook turns YAML values into Duration and Size. Only values present
// in the document reach it (null does not), so it rejects explicit zeros,
// which would otherwise silently mean "inherit".
func decodeHook(_, to reflect.Type, data any) (any, error) {
	switch to {
	case durationType:
		switch v := data.(type) {
		case string:
			d, err := parseDuration(v)
			if err != nil {
				return nil, &hookError{err.Error()}
			}
			if d == 0 {
				return nil, &hookError{"must be positive, got 0s" + zeroHint}
			}
			return d, nil
		case int, int64, uint64, float64:
			if fmt.Sprint(v) == "0" {
				return nil, &hookError{"must be positive, got 0" + zeroHint}
			}
			return nil, &hookError{fmt.Sprintf("%v has no unit: write a Go duration such as 30s, 15m or 24h", v)}
		}
	case sizeType:
		var s Size
		switch v := data.(type) {
		case string:
			var err error
			if s, err = parseSize(v); err != nil {
				return nil, &hookError{err.Error()}
			}
		case int:
			s = Size(v)
		case int64:
			s = Size(v)
		case uint64:
			if v > math.MaxInt64 {
				return nil, &hookError{errSizeRange.Error()}
			}
			s = Size(v)
		case float64:
			if v != math.Trunc(v) || v < math.MinInt64 || v >= math.MaxInt64 {
				return nil, &hookError{fmt.Sprintf("%v is not a whole number of bytes", v)}
			}
			s = Size(v)
		default:
			return data, nil
		}
		if s == 0 {
			return nil, &hookError{"must be positive, got 0" + zeroHint}
		}
		return s, nil
	}
	return data, nil
}

// decodeErrors converts mapstructure's errors into located errors.
func (x *docIndex) decodeErrors(err error) ErrorList {
	var list ErrorList
	x.collectDecodeErrors(err, &list)
	if len(list) == 0 {
		list = ErrorList{{Line: 1, Msg: err.Error()}}
	}
	return list
}

var rulesTypeName = reflect.TypeFor[Rules]().String()

func (x *docIndex) collectDecodeErrors(err error, list *ErrorList) {
	switch de, ok := err.(*mapstructure.DecodeError); {
	case ok:
		inner := de.Unwrap()
		if isDecodeTree(inner) {
			x.collectDecodeErrors(inner, list)
			return
		}
		field := de.Name()
		if field == rulesTypeName {
			field = ""
		}
		msg := inner.Error()
		if keys, ok := strings.CutPrefix(msg, "has invalid keys: "); ok {
			for _, k := range strings.Split(keys, ", ") {
				x.unknownField(field, k, list)
			}
			return
		}
		var he *hookError
		if errors.As(inner, &he) {
			msg = he.msg
		} else if t := typeAt(field); t != nil {
			n, _ := x.lookup(field)
			msg = "must be " + describeType(t) + ", not " + describeNode(n)
			if t.Kind() == reflect.String && n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
				msg += " (quote it to make it a string)"
			}
		}
		*list = append(*list, &Error{Line: x.line(field), Field: field, Msg: msg})
	default:
		if u, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range u.Unwrap() {
				x.collectDecodeErrors(e, list)
			}
			return
		}
		if u := errors.Unwrap(err); u != nil {
			x.collectDecodeErrors(u, list)
			return
		}
		*list = append(*list, &Error{Line: x.line(""), Msg: err.Error()})
	}
}

// isDecodeTree reports whether err holds further mapstructure errors.
func isDecodeTree(err error) bool {
	if _, ok := err.(interface{ Unwrap() []error }); ok {
		return true
	}
	var de *mapstructure.DecodeError
	return errors.As(err, &de)
}

// unknownField reports key, unknown in the mapping at parent, with a
// suggestion when it looks like a typo of a known field.
func (x *docIndex) unknownField(parent, key string, list *ErrorList) {
	text, line := x.findChild(parent, key)
	if text != "" {
		key = text
	}
	field := joinField(parent, key)
	msg := "unknown field"
	if t := typeAt(parent); t != nil && t.Kind() == reflect.Struct {
		if s := suggest(key, fieldNames(t)); s != "" {
			msg += "; did you mean " + s + "?"
		}
	}
	*list = append(*list, &Error{Line: line, Field: field, Msg: msg})
}

// suggest returns the known name closest to s, if it is close enough to be
// a likely typo.
func suggest(s string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(s, k); d < bestDist && d < len(k)/2+1 {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// explicitEmpty reports fields written as "" where an empty string would
// otherwise silently mean "not set". (forward_key_header: "" is meaningful
// and allowed.)
func (x *docIndex) explicitEmpty(r *Rules) ErrorList {
	var list ErrorList
	check := func(field, value, msg string) {
		if value == "" && x.isEmptyString(field) {
			list = append(list, &Error{Line: x.line(field), Field: field, Msg: msg})
		}
	}
	policy := func(prefix string, p *Policy) {
		check(prefix+".on_unknown_outcome", p.OnUnknownOutcome,
			enumMessage("", []string{OnUnknownHold, OnUnknownRelease, OnUnknownStore}))
		check(prefix+".on_store_error", p.OnStoreError,
			enumMessage("", []string{OnStoreErrorFailClosed, OnStoreErrorFailOpen}))
	}
	policy("defaults", &r.Defaults)
	for i := range r.Routes {
		rt := &r.Routes[i]
		check(routeField(i, "operation"), rt.Operation, "must not be empty (leave it out to use the route's name)")
		check(routeField(i, "external_id"), rt.ExternalID, "must not be empty (leave it out to record no external id)")
		policy("routes["+strconv.Itoa(i)+"]", &rt.Policy)
	}
	return list
}
