package idemgate_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/idemgate/idemgate"

// TestOnlyTheRootImportsTheHandler: package caddymodule is the top of the
// module's import graph (docs/architecture.md, "Imports run one way").
// Only the module root, which registers the modules, and the commands
// may reach it; the operator API (adminapi), the console and every
// package below the handler reach the running config's stores through
// storepool, never through caddymodule, directly or through another
// package. Test files are not counted: a test may provision a handler.
func TestOnlyTheRootImportsTheHandler(t *testing.T) {
	pkgs := modulePackages(t)
	handler := module + "/caddymodule"
	if _, ok := pkgs[handler]; !ok {
		t.Fatalf("package %s not found", handler)
	}
	for _, must := range []string{"adminapi", "console", "operator", "storepool"} {
		if _, ok := pkgs[module+"/"+must]; !ok {
			t.Fatalf("package %s not found", must)
		}
	}
	for path, p := range pkgs {
		if path == module || path == handler || p.Name == "main" {
			continue
		}
		if via := reaches(pkgs, path, handler); via != nil {
			t.Errorf("%s imports caddymodule: %s", strings.TrimPrefix(path, module+"/"), strings.Join(via, " → "))
		}
	}
}

// modulePackages returns the module's packages by import path, each with
// its non-test imports for this platform.
func modulePackages(t *testing.T) map[string]*build.Package {
	t.Helper()
	pkgs := map[string]*build.Package{}
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); dir != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if dir != "." {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		p, err := build.ImportDir(dir, 0)
		if _, none := err.(*build.NoGoError); none {
			return nil
		}
		if err != nil {
			return err
		}
		path := module
		if dir != "." {
			path += "/" + filepath.ToSlash(dir)
		}
		pkgs[path] = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// reaches returns the chain of imports from the package from to the
// package to, or nil when from does not depend on it.
func reaches(pkgs map[string]*build.Package, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var chain []string
			for at := cur; at != ""; at = prev[at] {
				chain = append(chain, strings.TrimPrefix(at, module+"/"))
			}
			slices.Reverse(chain)
			return chain
		}
		p := pkgs[cur]
		if p == nil {
			continue // outside the module
		}
		for _, imp := range p.Imports {
			if _, seen := prev[imp]; !seen && strings.HasPrefix(imp, module) {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return nil
}
