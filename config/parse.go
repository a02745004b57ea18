package config

import (
	"bytes"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Load reads a YAML rules file and returns its rules, validated and
// checked against l (the zero Limits: the rules alone). Problems are an
// ErrorList naming file, line and field; an error reading the file is
// returned as it is (an *fs.PathError).
func Load(path string, l Limits) (*Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data, l)
}

// Parse decodes YAML rules from data and validates them against l, like
// Load; name is the file name used in error messages. The document must
// hold a single mapping; each field may be set once per mapping.
//
// What is allowed but probably wrong is not an error: the rules'
// Warnings name it, with file, line and field.
func Parse(name string, data []byte, l Limits) (*Rules, error) {
	r, errs := parse(data, l)
	if len(errs) == 0 {
		if len(r.warnings) > 0 {
			r.warnings = located(name, r.warnings)
		}
		return r, nil
	}
	return nil, located(name, errs)
}

// maxErrors is how many problems Parse reports at most; the rest are
// counted in one last entry.
const maxErrors = 100

// parse does the work of Parse; its errors have lines but no file name.
func parse(data []byte, l Limits) (*Rules, ErrorList) {
	var r Rules
	d, errs, ok := decodeDocument(data, reflect.ValueOf(&r).Elem(), "the rules", "a mapping with defaults and routes")
	if !ok {
		return nil, errs
	}
	// Validate what did decode, so that one run reports every problem.
	if errs := r.check(l, &d.errorList); len(errs) > 0 {
		return nil, errs
	}
	r.warnings, r.parsed = d.warns, true
	return &r, nil
}

var (
	// yamlErrorRE splits an error of the YAML library into its line, when
	// it has one, and its problem.
	yamlErrorRE = regexp.MustCompile(`(?s)^(?:yaml: )?(?:line (\d+): )?(.*)$`)
	// parserRE matches the problems of the YAML parser (parserc.go), whose
	// lines are 0-based; the scanner's are 1-based.
	parserRE = regexp.MustCompile(`^(did not find expected (<|node |key$|'-'|',')|found (duplicate|incompatible|undefined) )`)
	// anchorRE matches the problems with an alias or anchor, which carry no
	// line: the line is where "*name" (or "&name") is first written.
	anchorRE = regexp.MustCompile(`^(?:unknown anchor '(.+)' referenced|anchor '(.+)' value contains itself)$`)
)

// yamlError locates a YAML syntax error. The library leaves out the line
// of problems on the first line, and of alias and encoding problems.
func yamlError(err error, data []byte) ErrorList {
	m := yamlErrorRE.FindStringSubmatch(err.Error())
	line, _ := strconv.Atoi(m[1])
	switch a := anchorRE.FindStringSubmatch(m[2]); {
	case parserRE.MatchString(m[2]):
		line++
	case line > 0:
	case a != nil && a[1] != "":
		line = lineAt(data, bytes.Index(data, []byte("*"+a[1])))
	case a != nil:
		line = lineAt(data, bytes.Index(data, []byte("&"+a[2])))
	default: // the first byte YAML rejects outright: invalid UTF-8 or a control character
		line = lineAt(data, bytes.IndexFunc(data, func(r rune) bool {
			return r == utf8.RuneError || r < 0x20 && r != '\t' && r != '\r' && r != '\n' || r == 0x7f
		}))
	}
	return ErrorList{{Line: line, Msg: "invalid YAML: " + m[2]}}
}

// lineAt returns the line of byte offset off in data (1 for off < 0), with
// YAML's line breaks: LF, CR, CR LF, NEL, LS and PS.
func lineAt(data []byte, off int) int {
	s := strings.ReplaceAll(string(data[:max(min(off, len(data)), 0)]), "\r\n", "\n")
	return 1 + strings.Count(s, "\n") + strings.Count(s, "\r") +
		strings.Count(s, "\u0085") + strings.Count(s, "\u2028") + strings.Count(s, "\u2029")
}
