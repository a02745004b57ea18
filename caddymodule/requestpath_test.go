package caddymodule

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRequestPathListing keeps docs/request-path.md true: every function
// its execute listing names is declared in the file the listing puts it
// in, each row is in another file than the one before, the crossings
// stated are the rows' changes of file, and the listing leaves no call out:
// every function a listed function calls (or a helper of its own file that
// it calls, and so on) in another file is listed, or named among the calls
// this execute does not take. Counted are the files of caddymodule and of
// what was split out of it (storepool, verify, and store's storable
// headers), and the packages split out of it since (breaker, exchange,
// metrics, problem, redrive, sealed, secret, unrecorded).
func TestRequestPathListing(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "request-path.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "<!-- request-path:")
	if !ok {
		t.Fatal("docs/request-path.md: no request-path marker")
	}
	table, offPath, ok := strings.Cut(table, "<!-- off-path:")
	if !ok {
		t.Fatal("docs/request-path.md: no off-path marker")
	}
	offPath, _, ok = strings.Cut(offPath, "<!-- /off-path -->")
	if !ok {
		t.Fatal("docs/request-path.md: the off-path list has no end marker")
	}
	g := loadCallGraph(t)
	row := regexp.MustCompile(`(?m)^\| (\d+) \| (\S+\.go) \| (.+) \|$`)
	fn := regexp.MustCompile("`([^`]+)`")
	var files []string
	var rows []map[string]bool // the functions of each row
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		n, file := m[1], m[2]
		if want := strconv.Itoa(len(files) + 1); n != want {
			t.Errorf("row %s: numbered out of order, want %s", n, want)
		}
		if len(files) > 0 && files[len(files)-1] == file {
			t.Errorf("row %s: %s again, not a crossing", n, file)
		}
		files = append(files, file)
		names := fn.FindAllStringSubmatch(m[3], -1)
		if len(names) == 0 {
			t.Errorf("row %s: no function", n)
		}
		rows = append(rows, map[string]bool{})
		for _, name := range names {
			if got := g.file[name[1]]; got != file {
				t.Errorf("row %s: %s is in %q, the listing says %s", n, name[1], got, file)
			}
			rows[len(rows)-1][name[1]] = true
		}
	}
	if len(files) < 2 {
		t.Fatalf("the listing has %d rows", len(files))
	}
	skipped := map[string]bool{}
	pair := regexp.MustCompile("`([^`]+)` → `([^`]+)`")
	for _, line := range strings.Split(offPath, "\n") {
		if m := pair.FindStringSubmatch(line); m != nil {
			skipped[m[1]+" → "+m[2]] = true
			line = strings.Replace(line, m[0], "", 1)
		}
		for _, name := range fn.FindAllStringSubmatch(line, -1) {
			if g.file[name[1]] == "" {
				t.Errorf("off the path: %s is not a function here", name[1])
			}
			skipped[name[1]] = true
		}
	}
	for _, missing := range g.leftOut(rows, skipped) {
		t.Errorf("the listing leaves out a call into another file: %s", missing)
	}
	stated := regexp.MustCompile(`\*\*(\d+) crossings\*\*`).FindStringSubmatch(table)
	crossings := len(files) - 1
	switch {
	case stated == nil:
		t.Error("the listing states no crossing count")
	case stated[1] != strconv.Itoa(crossings):
		t.Errorf("the listing states %s crossings, its rows make %d", stated[1], crossings)
	}
}

// callGraph is the functions of caddymodule and of the packages split out
// of it, by name ("f", "(*T).m"; "pkg.f" outside caddymodule), with the
// file that declares each (relative to caddymodule's directory, "../pkg/f.go"
// outside it) and the functions each one calls or takes as a value.
type callGraph struct {
	file  map[string]string
	calls map[string][]string
}

// counted are the packages, besides caddymodule, whose files a crossing
// may enter, and the files of each (nil: all).
var counted = map[string][]string{
	"breaker":    nil,
	"exchange":   nil,
	"metrics":    nil,
	"problem":    nil,
	"redrive":    nil,
	"routematch": nil,
	"sealed":     nil,
	"secret":     nil,
	"storepool":  nil,
	"unrecorded": nil,
	"verify":     nil,
	"store":      {"storable.go"},
}

// notSplitOut are the packages of this module that caddymodule imports
// and whose files a crossing does not count: none of them was split out
// of caddymodule (keying, config and store are the ground it stands on;
// operator is the service it serves; signature checks a webhook's
// sender and protocol/mcp reads an MCP endpoint's JSON-RPC, and neither
// ever was part of it). A package split out of caddymodule
// goes in counted; one that is in neither list fails the test.
var notSplitOut = map[string]bool{"keying": true, "config": true, "store": true, "operator": true, "signature": true, "protocol/mcp": true}

// leftOut walks the calls of the functions of each row, and of the
// same-file helpers they call that the listing does not list, and returns
// each call into another file that the listing does not show. A call from
// f into function c of another file is shown when some row that reaches f
// is followed by a row that lists c: that pair of rows is the call's
// crossing. Calls this execute does not take are skipped ("c", or
// "f → c").
func (g *callGraph) leftOut(rows []map[string]bool, skipped map[string]bool) []string {
	listed := map[string]bool{}
	for _, row := range rows {
		maps.Copy(listed, row)
	}
	shown := map[string]bool{}
	var calls []string
	for i, row := range rows {
		seen := map[string]bool{}
		var walk func(f string)
		walk = func(f string) {
			if seen[f] {
				return
			}
			seen[f] = true
			for _, c := range g.calls[f] {
				call := f + " (" + g.file[f] + ") → " + c + " (" + g.file[c] + ")"
				switch {
				case skipped[c], skipped[f+" → "+c]:
				case g.file[c] == g.file[f]:
					if !listed[c] { // a listed function has rows of its own
						walk(c)
					}
				case i+1 < len(rows) && rows[i+1][c]:
					shown[call] = true
				default:
					calls = append(calls, call)
				}
			}
		}
		for _, f := range slices.Sorted(maps.Keys(row)) {
			walk(f)
		}
	}
	var out []string
	for _, call := range calls {
		if !shown[call] && !slices.Contains(out, call) {
			out = append(out, call)
		}
	}
	return out
}

// loadCallGraph type-checks caddymodule and the counted packages from
// source; every other import is an empty stand-in (its uses do not
// resolve, and are not counted).
func loadCallGraph(t *testing.T) *callGraph {
	t.Helper()
	fset := token.NewFileSet()
	g := &callGraph{file: map[string]string{}, calls: map[string][]string{}}
	checked := map[string]*types.Package{}
	const module = "github.com/idemgate/idemgate/"
	var check func(dir, path string) *types.Package
	imp := importerFunc(func(path string) (*types.Package, error) {
		if p := checked[path]; p != nil {
			return p, nil
		}
		if rel, ok := strings.CutPrefix(path, module); ok {
			if _, ok := counted[rel]; ok {
				return check(filepath.Join("..", rel), path), nil
			}
			if !notSplitOut[rel] && !strings.HasPrefix(rel, "store/") {
				t.Errorf("%s is imported by caddymodule or a package split out of it, and the listing neither counts it nor names it as not split out", rel)
			}
		}
		name := path[strings.LastIndex(path, "/")+1:]
		p := types.NewPackage(path, name)
		p.MarkComplete()
		checked[path] = p
		return p, nil
	})
	check = func(dir, path string) *types.Package {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		var files []*ast.File
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: imp, Error: func(error) {}, FakeImportC: true}
		pkg, _ := conf.Check(path, fset, files, info)
		checked[path] = pkg
		only := counted[strings.TrimPrefix(path, module)]
		for _, f := range files {
			file := filepath.ToSlash(fset.Position(f.Pos()).Filename)
			file = strings.TrimPrefix(file, "../"+strings.TrimPrefix(path, module)+"/")
			if dir != "." {
				file = strings.TrimPrefix(path, module) + "/" + file
			}
			if only != nil && !slices.Contains(only, filepath.Base(file)) {
				continue
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				fn, _ := info.Defs[fd.Name].(*types.Func)
				if fn == nil {
					continue
				}
				name := funcName(fn)
				g.file[name] = file
				if fd.Body == nil {
					continue
				}
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok {
						if callee, ok := info.Uses[id].(*types.Func); ok && callee.Pkg() != nil {
							g.calls[name] = append(g.calls[name], funcName(callee))
						}
					}
					return true
				})
			}
		}
		return pkg
	}
	check(".", module+"caddymodule")
	// Calls into packages that are not counted are not edges.
	for f, callees := range g.calls {
		g.calls[f] = slices.DeleteFunc(callees, func(c string) bool { return g.file[c] == "" })
	}
	return g
}

// funcName names fn as the listing does: "f", "(*T).m", "(T).m", with
// "pkg." before it outside caddymodule.
func funcName(fn *types.Func) string {
	name := fn.Name()
	if recv := fn.Type().(*types.Signature).Recv(); recv != nil {
		typ := recv.Type()
		ptr := ""
		if p, ok := typ.(*types.Pointer); ok {
			typ, ptr = p.Elem(), "*"
		}
		if n, ok := typ.(*types.Named); ok {
			name = "(" + ptr + n.Obj().Name() + ")." + name
		}
	}
	if fn.Pkg().Name() != "caddymodule" {
		name = fn.Pkg().Name() + "." + name
	}
	return name
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// TestLeftOut: a call into another file is shown only by a row that lists
// the callee right after a row that reaches the caller (through the
// caller's unlisted same-file helpers too), or named as not taken.
func TestLeftOut(t *testing.T) {
	t.Parallel()
	g := &callGraph{
		file: map[string]string{"serve": "a.go", "helper": "a.go", "claim": "b.go", "observe": "c.go", "other": "c.go"},
		calls: map[string][]string{
			"serve":  {"helper", "claim"},
			"helper": {"observe"},
			"claim":  {"other"},
		},
	}
	row := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		rows    []map[string]bool
		skipped map[string]bool
		want    int
	}{
		{"every call shown", []map[string]bool{row("serve"), row("observe"), row("serve"), row("claim"), row("other")}, nil, 0},
		{"a helper's call left out", []map[string]bool{row("serve"), row("claim"), row("other")}, nil, 1},
		{"named as not taken", []map[string]bool{row("serve"), row("claim"), row("other")}, map[string]bool{"observe": true}, 0},
		{"not taken from that caller", []map[string]bool{row("serve"), row("claim"), row("other")}, map[string]bool{"helper → observe": true}, 0},
		{"the callee listed, but not after the caller", []map[string]bool{row("serve"), row("observe"), row("serve"), row("other"), row("claim")}, nil, 2},
	} {
		if got := g.leftOut(tc.rows, tc.skipped); len(got) != tc.want {
			t.Errorf("%s: left out %v, want %d", tc.name, got, tc.want)
		}
	}
}
