package caddymodule

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemgate/idemgate/keying"
)

func TestSealer(t *testing.T) {
	s, err := newSealer([]byte("a deployment secret of some length"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := newSealer([]byte("another deployment secret, longer"))
	kr := &keptRequest{Method: "POST", Target: "/crm/deals?x=1", Host: "api.example", Key: "evt_184",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"note":"MARKER-1"}`)}
	const id = "0123456789abcdef0123456789abcdef"
	sealed, err := s.seal(id, kr)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s.seal(id, kr)
	for _, leak := range []string{"MARKER-1", "evt_184", "crm/deals", "application/json"} {
		if bytes.Contains(sealed, []byte(leak)) {
			t.Fatalf("the sealed request shows %q", leak)
		}
	}
	if bytes.Equal(sealed, again) {
		t.Fatal("two seals of one request are equal: the nonce repeats")
	}
	got, err := s.open(id, sealed)
	if err != nil || !reflect.DeepEqual(got, kr) {
		t.Fatalf("open: %v, %+v", err, got)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	for _, tc := range []struct {
		name   string
		s      *sealer
		id     string
		sealed []byte
	}{
		{"another record's id", s, "ffffffffffffffffffffffffffffffff", sealed},
		{"another secret", other, id, sealed},
		{"a changed byte", s, id, tampered},
		{"too short", s, id, sealed[:5]},
		{"another version", s, id, append([]byte{9}, sealed[1:]...)},
	} {
		if _, err := tc.s.open(tc.id, tc.sealed); err != errUnsealable {
			t.Errorf("%s: open = %v, want errUnsealable", tc.name, err)
		}
	}
}

func TestKeptHeaders(t *testing.T) {
	rt := &route{scopeHeaders: map[string]bool{}}
	for _, name := range keying.MustParseTemplate("{header.X-Tenant}:{query.t}").Headers() {
		rt.scopeHeaders[name] = true
	}
	in := http.Header{
		"Authorization": {"Bearer client"}, "Cookie": {"sid=1"}, "X-Api-Key": {"k"}, "Idempotency-Key": {"evt"},
		"X-Hub-Signature": {"sig"}, "X-Tenant": {"acme"}, "Connection": {"close"}, "Content-Length": {"10"},
		"Content-Type": {"application/json"}, "X-Trace": {"t-1"}, "Accept": {"application/json", "text/plain"},
	}
	want := http.Header{"Content-Type": {"application/json"}, "X-Trace": {"t-1"}, "Accept": {"application/json", "text/plain"}}
	if got := keptHeaders(rt, in); !reflect.DeepEqual(got, want) {
		t.Fatalf("kept headers:\n got %v\nwant %v", got, want)
	}
}
