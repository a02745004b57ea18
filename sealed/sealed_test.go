package sealed

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemgate/idemgate/config"
)

func TestSealer(t *testing.T) {
	s, err := New([]byte("a deployment secret of some length"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := New([]byte("another deployment secret, longer"))
	kr := &Request{Method: "POST", Target: "/crm/deals?x=1", Host: "api.example", Key: "evt_184",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"note":"MARKER-1"}`)}
	const id = "0123456789abcdef0123456789abcdef"
	sealed, err := s.Seal(id, kr)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s.Seal(id, kr)
	for _, leak := range []string{"MARKER-1", "evt_184", "crm/deals", "application/json"} {
		if bytes.Contains(sealed, []byte(leak)) {
			t.Fatalf("the sealed request shows %q", leak)
		}
	}
	if bytes.Equal(sealed, again) {
		t.Fatal("two seals of one request are equal: the nonce repeats")
	}
	got, err := s.Open(id, sealed)
	if err != nil || !reflect.DeepEqual(got, kr) {
		t.Fatalf("open: %v, %+v", err, got)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	for _, tc := range []struct {
		name   string
		s      *Sealer
		id     string
		sealed []byte
	}{
		{"another record's id", s, "ffffffffffffffffffffffffffffffff", sealed},
		{"another secret", other, id, sealed},
		{"a changed byte", s, id, tampered},
		{"too short", s, id, sealed[:5]},
		{"another version", s, id, append([]byte{9}, sealed[1:]...)},
	} {
		if _, err := tc.s.Open(tc.id, tc.sealed); err != ErrUnsealable {
			t.Errorf("%s: open = %v, want ErrUnsealable", tc.name, err)
		}
	}
}

// TestKeptHeaders: a kept request carries Content-Type, Content-Encoding,
// Accept, the headers the route's key reads and its keep_headers, never
// one its scope reads, and nothing else: not the caller's credentials,
// not a DPoP proof or a webhook signature bound to the first delivery.
func TestKeptHeaders(t *testing.T) {
	in := http.Header{
		"Authorization": {"Bearer client"}, "Cookie": {"sid=1"}, "X-Api-Key": {"k"}, "Idempotency-Key": {"evt"},
		"Dpop": {"eyJ.proof"}, "X-Shopify-Hmac-Sha256": {"c2ln"}, "X-Hub-Signature": {"sig"}, "X-Tenant": {"acme"},
		"Connection": {"close"}, "Content-Length": {"10"}, "Content-Type": {"application/json"}, "Content-Encoding": {"gzip"},
		"X-Trace": {"t-1"}, "Accept": {"application/json", "text/plain"}, "X-Delivery-Id": {"d-9"},
	}
	for _, tc := range []struct {
		name  string
		rules string
		want  http.Header
	}{
		{"the built-in allowlist and the key's header", `key: ["{header.Idempotency-Key}"]`, http.Header{
			"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}, "Accept": {"application/json", "text/plain"},
			"Idempotency-Key": {"evt"},
		}},
		{"keep_headers", "key: [\"{header.X-Delivery-Id}:{body.id}\"]\n    keep_headers: [x-trace, X-Missing]", http.Header{
			"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}, "Accept": {"application/json", "text/plain"},
			"X-Delivery-Id": {"d-9"}, "X-Trace": {"t-1"},
		}},
		{"never what the scope reads", "key: [\"{header.X-Delivery-Id}\"]\n    scope: [\"{header.X-Tenant}\"]\n    keep_headers: [X-Tenant]", http.Header{
			"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}, "Accept": {"application/json", "text/plain"},
			"X-Delivery-Id": {"d-9"},
		}},
	} {
		rules, err := config.Parse("r.yaml", []byte("routes:\n  - name: r\n    match: { path: /r }\n    "+tc.rules+"\n"), config.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := rules.Resolve(config.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if got := Headers(HeaderSet(&res[0]), in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: kept headers:\n got %v\nwant %v", tc.name, got, tc.want)
		}
	}
}
