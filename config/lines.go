package config

import (
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file maps field paths such as "routes[1].on_unknown_outcome" to the
// lines of a YAML document. Viper keeps no positions, so Parse also parses
// the same bytes into a yaml.Node tree and looks fields up there.

// maxAliasDepth bounds alias and merge-key chains followed while looking a
// field up, so that a hostile document cannot make a lookup expensive.
const maxAliasDepth = 16

// docIndex locates fields in one parsed YAML document.
type docIndex struct {
	root *yaml.Node // the document's top-level node; nil when empty
}

// segment is one step of a field path: a mapping key or a list index.
type segment struct {
	name  string
	index int // -1 for a mapping key
}

// splitPath splits "routes[1].match.methods[0]" into its segments.
func splitPath(field string) []segment {
	var segs []segment
	for field != "" {
		switch field[0] {
		case '.':
			field = field[1:]
		case '[':
			end := strings.IndexByte(field, ']')
			if end < 0 {
				return segs
			}
			i, err := strconv.Atoi(field[1:end])
			if err != nil || i < 0 {
				return segs
			}
			segs = append(segs, segment{index: i})
			field = field[end+1:]
		default:
			end := strings.IndexAny(field, ".[")
			if end < 0 {
				end = len(field)
			}
			segs = append(segs, segment{name: field[:end], index: -1})
			field = field[end:]
		}
	}
	return segs
}

// lookup follows field as far as the document goes. It returns the node
// the path ends at (nil unless the whole path exists) and the line of the
// deepest part found: the key's line for a mapping field, the element's
// line for a list item, the document's first line when nothing matched.
func (x *docIndex) lookup(field string) (node *yaml.Node, line int) {
	if x == nil || x.root == nil {
		return nil, 0
	}
	n := x.root
	line = n.Line
	for _, seg := range splitPath(field) {
		n = deref(n)
		if n == nil {
			return nil, line
		}
		if seg.index >= 0 {
			if n.Kind != yaml.SequenceNode || seg.index >= len(n.Content) {
				return nil, line
			}
			n = n.Content[seg.index]
			line = n.Line
			continue
		}
		if n.Kind != yaml.MappingNode {
			return nil, line
		}
		k, v := findKey(n, seg.name, 0)
		if k == nil {
			return nil, line
		}
		n, line = v, k.Line
	}
	return deref(n), line
}

// line returns the line of field, or of its closest existing parent.
func (x *docIndex) line(field string) int {
	_, line := x.lookup(field)
	return line
}

// findChild finds key name in the mapping at parent, as written (viper
// reports keys lowercased, and a key may itself contain dots). It returns
// the key's text and line, or "" and the line of the closest existing part
// of parent.
func (x *docIndex) findChild(parent, name string) (text string, line int) {
	n, line := x.lookup(parent)
	if n == nil || n.Kind != yaml.MappingNode {
		return "", line
	}
	if k, _ := findKey(n, name, 0); k != nil {
		return k.Value, k.Line
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && strings.EqualFold(k.Value, name) {
			return k.Value, k.Line
		}
	}
	return "", line
}

// isEmptyString reports whether field is present and written as an empty
// string (quoted, with nothing inside), as opposed to absent or null.
func (x *docIndex) isEmptyString(field string) bool {
	n, _ := x.lookup(field)
	return n != nil && n.Kind == yaml.ScalarNode && n.Value == "" && n.ShortTag() == "!!str"
}

// findKey finds name in mapping m: first among its own keys, then in the
// mappings merged into it with "<<", in YAML's order of precedence.
func findKey(m *yaml.Node, name string, depth int) (key, value *yaml.Node) {
	if depth > maxAliasDepth {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.Kind == yaml.ScalarNode && k.Value == name && !isMerge(k) {
			return k, m.Content[i+1]
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if !isMerge(m.Content[i]) {
			continue
		}
		v := deref(m.Content[i+1])
		if v == nil {
			continue
		}
		switch v.Kind {
		case yaml.MappingNode:
			if k, val := findKey(v, name, depth+1); k != nil {
				return k, val
			}
		case yaml.SequenceNode:
			for _, e := range v.Content {
				if e = deref(e); e != nil && e.Kind == yaml.MappingNode {
					if k, val := findKey(e, name, depth+1); k != nil {
						return k, val
					}
				}
			}
		}
	}
	return nil, nil
}

// isMerge reports whether k is the merge key "<<" (as go.yaml.in/yaml/v3
// decides it).
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" &&
		(k.Tag == "" || k.Tag == "!" || k.Tag == "!!merge" || k.Tag == "tag:yaml.org,2002:merge")
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > maxAliasDepth {
			return nil
		}
		n = n.Alias
	}
	return n
}

// describeNode names a YAML value for an error message: `the string "x"`,
// `30`, `a list`, `a mapping`, `null`.
func describeNode(n *yaml.Node) string {
	n = deref(n)
	if n == nil {
		return "null"
	}
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "the string " + quote(n.Value)
		case "!!null":
			return "null"
		case "!!timestamp":
			return "the time " + n.Value
		case "!!int", "!!float", "!!bool":
			if len(n.Value) > 32 {
				return quote(n.Value)
			}
			return n.Value
		}
		return quote(n.Value)
	}
	return "a value of another kind"
}

// lint checks what viper cannot report with a line, or would hide: keys
// that are not plain lower-case names (viper lowercases keys, so "TTL" and
// "ttl" would silently collide), keys set twice, and merge keys ("<<")
// whose value is not a mapping or a list of mappings. Aliases are not
// followed: the anchored value is checked where it is written.
func lint(n *yaml.Node, path string, c *ErrorList) {
	switch n.Kind {
	case yaml.SequenceNode:
		for i, e := range n.Content {
			lint(e, path+"["+strconv.Itoa(i)+"]", c)
		}
	case yaml.MappingNode:
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if isMerge(k) {
				if !validMerge(v) {
					*c = append(*c, &Error{Line: k.Line, Field: path,
						Msg: "the merge key << needs a mapping or a list of mappings, not " + describeNode(v)})
				}
				continue
			}
			if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
				*c = append(*c, &Error{Line: k.Line, Field: path,
					Msg: describeNode(k) + " is not a field name"})
				continue
			}
			field := joinField(path, k.Value)
			// The keys of a map field (verify.headers) are data, in any
			// case; viper lowercases them all the same, so they must
			// differ in more than case.
			lower := strings.ToLower(k.Value)
			if t := typeAt(path); lower != k.Value && (t == nil || t.Kind() != reflect.Map) {
				*c = append(*c, &Error{Line: k.Line, Field: field,
					Msg: "field names are lower case: write " + quote(lower)})
				continue
			}
			if first, dup := seen[lower]; dup {
				*c = append(*c, &Error{Line: k.Line, Field: field,
					Msg: "is set twice (first on line " + strconv.Itoa(first) + ")"})
				continue
			}
			seen[lower] = k.Line
			lint(v, field, c)
		}
	}
}

func validMerge(v *yaml.Node) bool {
	v = deref(v)
	if v == nil {
		return false
	}
	switch v.Kind {
	case yaml.MappingNode:
		return true
	case yaml.SequenceNode:
		for _, e := range v.Content {
			if e = deref(e); e == nil || e.Kind != yaml.MappingNode {
				return false
			}
		}
		return true
	}
	return false
}

func joinField(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// typeAt returns the Go type a field path decodes into, or nil.
func typeAt(field string) reflect.Type {
	t := reflect.TypeFor[Rules]()
	for _, seg := range splitPath(field) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if seg.index >= 0 {
			if t.Kind() != reflect.Slice {
				return nil
			}
			t = t.Elem()
			continue
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		f, ok := fieldByTag(t, seg.name)
		if !ok {
			return nil
		}
		t = f.Type
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// fieldByTag finds the struct field with the given mapstructure name,
// looking into squashed embedded structs.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		tagName, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && opts == "squash" {
			if sf, ok := fieldByTag(f.Type, name); ok {
				return sf, true
			}
			continue
		}
		if tagName == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// fieldNames lists the mapstructure names of the fields of struct t.
func fieldNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tagName, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if f.Anonymous && opts == "squash" {
			names = append(names, fieldNames(f.Type)...)
			continue
		}
		if tagName != "" {
			names = append(names, tagName)
		}
	}
	return names
}

// describeType names what a Go config type expects, for error messages.
func describeType(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Duration]():
		return "a duration such as 30s or 24h"
	case reflect.TypeFor[Size]():
		return "a size such as 1MiB or 1048576"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describeType(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String:
			return "a list of strings"
		case reflect.Int:
			return "a list of integers"
		}
		return "a list of mappings"
	case reflect.Struct:
		return "a mapping"
	}
	return t.String()
}
