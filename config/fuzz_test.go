package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, that every error it reports is
// located (a field or a line within the document) and that whatever it
// accepts resolves, and resolves the same after a JSON round trip.
func FuzzParse(f *testing.F) {
	for _, tt := range parseErrorTests {
		f.Add([]byte(tt.yaml))
	}
	for _, tt := range webhookErrorTests {
		f.Add([]byte(tt.yaml))
	}
	f.Add([]byte(richRules))
	f.Add([]byte("routes:\n" + route))
	f.Add([]byte("routes:\n  - &r\n    name: a\n    match: {path: /a}\n    key: [\"{header.K}\"]\n  - <<: *r\n    name: b\n"))
	files, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("testdata/*/*.yaml")
	for _, name := range append(files, more...) {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse("f.yaml", data, Limits{})
		if err != nil {
			if r != nil {
				t.Fatalf("Parse returned rules and an error")
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %#v", err)
			}
			lines := lineAt(data, len(data))
			for _, e := range list {
				if e.File != "f.yaml" {
					t.Errorf("error without the file name: %q", e.Error())
				}
				if e.Line <= 0 && e.Field == "" {
					t.Errorf("error with neither a line nor a field: %q", e.Error())
				}
				if e.Line > lines+1 {
					t.Errorf("line %d beyond the document's %d lines: %q", e.Line, lines, e.Error())
				}
				if e.Msg == "" {
					t.Errorf("error without a message: %#v", e)
				}
			}
			return
		}
		if r == nil {
			t.Fatal("Parse returned neither rules nor an error")
		}
		want, err := r.Resolve(Limits{})
		if err != nil {
			t.Fatalf("Parse accepted rules that Resolve rejects: %v", err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		var back Rules
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("json.Unmarshal(%s): %v", b, err)
		}
		got, err := back.Resolve(Limits{})
		if err != nil {
			t.Fatalf("Resolve after a JSON round trip: %v\njson %s", err, b)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Resolve differs after a JSON round trip:\n got %+v\nwant %+v", got, want)
		}
	})
}
