package config

import (
	"reflect"
	"strconv"
	"strings"

	"github.com/agnivade/levenshtein"
	"go.yaml.in/yaml/v3"
)

// decoder fills the rules from a yaml.v3 node tree, strictly (field names
// are the JSON names), reporting every problem with field and line, and
// keeps each field's line for the problems Validate finds later.
type decoder struct {
	errs   ErrorList
	lines  map[string]int  // field path → line
	failed map[string]bool // fields that did not decode
	budget int             // values left to decode
}

// kinds are the YAML tag and the descriptions (one, a list) of each kind
// of Go value.
var kinds = map[reflect.Kind][3]string{reflect.String: {"!!str", "a string", "strings"},
	reflect.Bool: {"!!bool", "true or false"}, reflect.Int: {"!!int", "an integer", "integers"}}

func (d *decoder) fail(line int, field, msg string) {
	d.errs = append(d.errs, &Error{Line: line, Field: field, Msg: msg})
	d.failed[field] = true
}

// visit counts one decoded value and reports whether the budget allows it.
func (d *decoder) visit(line int, field string) bool {
	if d.budget--; d.budget == 0 {
		d.fail(line, field, "the document expands to too many values through aliases")
	}
	return d.budget > 0
}

// decode decodes n into v, the value of field, written on line.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, field string, line int) {
	if n = deref(n); !d.visit(line, field) || n.ShortTag() == "!!null" {
		return // null: absent, the field inherits
	}
	d.lines[field] = line
	if u, ok := v.Addr().Interface().(yaml.Unmarshaler); ok {
		if err := u.UnmarshalYAML(n); err != nil {
			d.fail(line, field, err.Error())
		}
		return
	}
	switch t := v.Type(); {
	case t.Kind() == reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
		d.decode(n, v.Elem(), field, line)
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		v.SetZero()
		d.mapping(n, v, field)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && n.Kind == yaml.MappingNode:
		d.dict(n, v, field)
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		v.Set(reflect.MakeSlice(t, len(n.Content), len(n.Content)))
		for i, e := range n.Content {
			d.decode(e, v.Index(i), field+"["+strconv.Itoa(i)+"]", e.Line)
		}
	case n.Kind != yaml.ScalarNode || n.ShortTag() != kinds[t.Kind()][0] || n.Decode(v.Addr().Interface()) != nil:
		msg := "must be " + describeType(t) + ", not " + describeNode(n)
		if t.Kind() == reflect.String && n.Kind == yaml.ScalarNode {
			msg += " (quote it to make it a string)"
		}
		d.fail(line, field, msg)
	}
}

// mapping decodes the mapping n into the struct v: the mappings merged
// into it with "<<" first, the last first, then its own keys, so that its
// own keys win over merged ones and earlier merged mappings over later.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, field string) {
	if !d.visit(n.Line, field) {
		return
	}
	for i := len(n.Content) - 2; i >= 0; i -= 2 {
		if k, m := n.Content[i], deref(n.Content[i+1]); isMerge(k) {
			list := []*yaml.Node{m}
			if m.Kind == yaml.SequenceNode {
				list = m.Content
			}
			for j := len(list) - 1; j >= 0; j-- {
				e := deref(list[j])
				if e.Kind != yaml.MappingNode {
					d.fail(k.Line, field, "the merge key << needs a mapping or a list of mappings, not "+describeNode(m))
					break
				}
				d.mapping(e, v, field)
			}
		}
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		name, f := k.Value, strings.TrimPrefix(field+"."+k.Value, ".")
		switch fv, known := fieldNamed(v, name); {
		case isMerge(k):
		case k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str":
			d.fail(k.Line, field, describeNode(k)+" is not a field name")
		case strings.ToLower(name) != name:
			d.fail(k.Line, f, "field names are lower case: write "+quote(strings.ToLower(name)))
		case seen[name] > 0:
			d.fail(k.Line, f, "is set twice (first on line "+strconv.Itoa(seen[name])+")")
		case !known:
			d.fail(k.Line, f, "unknown field"+suggest(name, v.Type(), len(d.errs) < maxErrors))
		default:
			seen[name] = k.Line
			d.decode(n.Content[i+1], fv, f, k.Line)
		}
	}
}

// dict decodes the mapping n into the map v (verify.headers): its keys
// are data, kept as written, in any case; each may be set once.
func (d *decoder) dict(n *yaml.Node, v reflect.Value, field string) {
	v.Set(reflect.MakeMapWithSize(v.Type(), len(n.Content)/2))
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		f := field + "." + k.Value
		switch {
		case k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str":
			d.fail(k.Line, field, describeNode(k)+" is not a name")
		case seen[k.Value] > 0:
			d.fail(k.Line, f, "is set twice (first on line "+strconv.Itoa(seen[k.Value])+")")
		default:
			seen[k.Value] = k.Line
			e := reflect.New(v.Type().Elem()).Elem()
			d.decode(n.Content[i+1], e, f, k.Line)
			v.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), e)
		}
	}
}

// line returns the line of field, or of its closest parent that has one.
func (d *decoder) line(field string) int {
	for ; field != ""; field = parent(field) {
		if l, ok := d.lines[field]; ok {
			return l
		}
	}
	return d.lines[""]
}

// failedAt reports whether field or one holding it failed to decode: a
// problem Validate finds there is a consequence.
func (d *decoder) failedAt(field string) bool {
	for f := field; ; f = parent(f) {
		if d.failed[f] || f == "" {
			return d.failed[f]
		}
	}
}

// parent returns the field holding field: "routes[1]" for "routes[1].ttl",
// "routes" for "routes[1]", "" for "routes".
func parent(field string) string { return field[:max(strings.LastIndexAny(field, ".["), 0)] }

// fieldNamed returns the field of struct v whose JSON name is name.
func fieldNamed(v reflect.Value, name string) (reflect.Value, bool) {
	for _, f := range reflect.VisibleFields(v.Type()) {
		if !f.Anonymous && jsonName(f) == name {
			return v.FieldByIndex(f.Index), true
		}
	}
	return reflect.Value{}, false
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// suggest returns "; did you mean X?" for the field of struct t closest
// to name, if it is close enough to be a likely typo (and worth the work:
// aliases can repeat a field many times).
func suggest(name string, t reflect.Type, worth bool) string {
	best, bestDist := "", 3
	if len(name) > 64 || !worth {
		return ""
	}
	for _, f := range reflect.VisibleFields(t) {
		k := jsonName(f)
		if d := levenshtein.ComputeDistance(name, k); k != "" && d < bestDist && d < len(k)/2+1 {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + best + "?"
}

// isMerge reports whether k is the merge key "<<".
func isMerge(k *yaml.Node) bool { return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" }

// deref follows an alias to the node it names (the parser rejects cycles).
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// describeNode names a YAML value for an error message: `the string "x"`,
// `30`, `a list`, `a mapping`, `null`.
func describeNode(n *yaml.Node) string {
	switch n = deref(n); {
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	}
	switch n.ShortTag() {
	case "!!str":
		return "the string " + quote(n.Value)
	case "!!null":
		return "null"
	case "!!timestamp":
		return "the time " + n.Value
	case "!!int", "!!float", "!!bool":
		if len(n.Value) <= 32 {
			return n.Value
		}
	}
	return quote(n.Value)
}

// describeType names what a Go config type expects, for error messages.
func describeType(t reflect.Type) string {
	switch {
	case t.Kind() == reflect.Struct:
		return "a mapping"
	case t.Kind() == reflect.Map:
		return "a mapping of names to " + kinds[t.Elem().Kind()][2]
	case t.Kind() != reflect.Slice:
		return kinds[t.Kind()][1]
	case t.Elem().Kind() == reflect.Struct:
		return "a list of mappings"
	}
	return "a list of " + kinds[t.Elem().Kind()][2]
}
