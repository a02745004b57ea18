package config

import (
	"bytes"
	"encoding/json"
	"reflect"
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
	again, err := back.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return again, b
}
