package config

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func equalResolved(a, b []Resolved) bool { return reflect.DeepEqual(a, b) }

// jsonRoundTrip writes r as Caddy's JSON, reads it back strictly and
// resolves it again: the JSON schema is the YAML one.
func jsonRoundTrip(t *testing.T, r *Rules) ([]Resolved, []byte) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Rules
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	again, err := back.Resolve(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return again, b
}

// wantParseErrors parses yaml as r.yaml and wants exactly the errors
// want, in order.
func wantParseErrors(t *testing.T, yaml string, want []string) {
	t.Helper()
	_, err := Parse("r.yaml", []byte(yaml), Limits{})
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("errors:\n got %s\nwant %s", strings.ReplaceAll(got, "\n", "\n     "), strings.Join(want, "\n     "))
	}
}
