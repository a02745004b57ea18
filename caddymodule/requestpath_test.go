package caddymodule

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestRequestPathListing keeps docs/request-path.md true: every function
// its execute listing names is declared in the file the listing puts it
// in, each row is in another file than the one before, the crossings
// stated are the rows' changes of file, and they are at most 12.
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
	declared := declaredFuncs(t)
	row := regexp.MustCompile(`(?m)^\| (\d+) \| (\S+\.go) \| (.+) \|$`)
	fn := regexp.MustCompile("`([^`]+)`")
	var files []string
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
		for _, name := range names {
			if got := declared[name[1]]; got != file {
				t.Errorf("row %s: %s is in %q, the listing says %s", n, name[1], got, file)
			}
		}
	}
	if len(files) < 2 {
		t.Fatalf("the listing has %d rows", len(files))
	}
	stated := regexp.MustCompile(`\*\*(\d+) crossings\*\*`).FindStringSubmatch(table)
	crossings := len(files) - 1
	switch {
	case stated == nil:
		t.Error("the listing states no crossing count")
	case stated[1] != strconv.Itoa(crossings):
		t.Errorf("the listing states %s crossings, its rows make %d", stated[1], crossings)
	}
	if crossings > 12 {
		t.Errorf("one execute crosses %d files, want at most 12", crossings)
	}
}

// declaredFuncs maps the package's functions, as "name" or "(*T).name",
// to the file that declares them.
func declaredFuncs(t *testing.T) map[string]string {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				switch r := fd.Recv.List[0].Type.(type) {
				case *ast.StarExpr:
					name = "(*" + r.X.(*ast.Ident).Name + ")." + name
				case *ast.Ident:
					name = "(" + r.Name + ")." + name
				}
			}
			out[name] = p
		}
	}
	return out
}
