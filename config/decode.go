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
	errorList
	budget int // values left to decode
}

// kinds are the YAML tag of each kind of Go value, and what one and a
// list of them are called in error messages.
var kinds = map[reflect.Kind][3]string{reflect.String: {"!!str", "a string", "strings"},
	reflect.Bool: {"!!bool", "true or false"}, reflect.Int: {"!!int", "an integer", "integers"},
	reflect.Struct: {"", "a mapping", "mappings"}}

func (d *decoder) fail(line int, field, msg string) {
	d.list = append(d.list, &Error{Line: line, Field: field, Msg: msg})
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
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		v.Set(reflect.MakeMapWithSize(t, len(n.Content)/2))
		d.mapping(n, v, field)
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

// mapping decodes the mapping n into v, a struct or a map. A struct's
// keys are its fields' JSON names, in lower case; the mappings merged
// into it with "<<" come first, the last first, so that its own keys win
// over merged ones and earlier merged mappings over later. A map's keys
// (verify.headers) are data, kept as written, in any case. Each key may
// be set once.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, field string) {
	isMap, notKey := v.Kind() == reflect.Map, " is not a field name"
	if isMap {
		notKey = " is not a name"
	} else if !d.visit(n.Line, field) {
		return
	}
	for i := len(n.Content) - 2; i >= 0 && !isMap; i -= 2 {
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
		case isMerge(k) && !isMap:
		case k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str":
			d.fail(k.Line, field, describeNode(k)+notKey)
		case !isMap && strings.ToLower(name) != name:
			d.fail(k.Line, f, "field names are lower case: write "+quote(strings.ToLower(name)))
		case seen[name] > 0:
			d.fail(k.Line, f, "is set twice (first on line "+strconv.Itoa(seen[name])+")")
		case !known:
			d.fail(k.Line, f, "unknown field"+suggest(name, v.Type(), len(d.list) < maxErrors))
		default:
			seen[name] = k.Line
			d.decode(n.Content[i+1], fv, f, k.Line)
			if isMap {
				v.SetMapIndex(reflect.ValueOf(name), fv)
			}
		}
	}
}

// fieldNamed returns the field of struct v whose JSON name is name, or a
// new element for the map v.
func fieldNamed(v reflect.Value, name string) (reflect.Value, bool) {
	if v.Kind() == reflect.Map {
		return reflect.New(v.Type().Elem()).Elem(), true
	}
	for _, f := range reflect.VisibleFields(v.Type()) {
		if !f.Anonymous && f.IsExported() && name != "" && jsonName(f) == name {
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
	switch t.Kind() {
	case reflect.Map:
		if t.Elem().Kind() == reflect.Slice {
			return "a mapping of names to lists of " + kinds[t.Elem().Elem().Kind()][2]
		}
		return "a mapping of names to " + kinds[t.Elem().Kind()][2]
	case reflect.Slice:
		return "a list of " + kinds[t.Elem().Kind()][2]
	}
	return kinds[t.Kind()][1]
}
