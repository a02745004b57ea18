package guard

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoCaddy: the steps of a guarded request are written against
// net/http alone; the Caddy module (package caddymodule) adapts Caddy's
// request to them. No file of this package imports Caddy.
func TestNoCaddy(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/caddyserver/") {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
