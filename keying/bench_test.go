package keying

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// benchBody returns a realistic JSON webhook body of about size bytes: an
// event envelope followed by a list of line items.
func benchBody(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"event": {"id": "evt_1Nq8XyZ2eZvKYlo2C3b4", "type": "deal.create", "created": 1714000000},`)
	b.WriteString(` "meta": {"delivery_attempt": 3, "source": "crm-webhooks"}, "amount": 1999, "currency": "EUR",`)
	b.WriteString(` "customer_id": "cus_9s6XKzkNRiz8i3", "items": [`)
	for i := 0; b.Len() < size-64; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `{"sku": "SKU-%05d", "qty": %d, "price": %d.%02d, "note": "line \"%d\" \u00e9"}`, i, i%7+1, i*3, i%100, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

var sink string

func BenchmarkDeriveKeyHeader(b *testing.B) {
	templates := []Template{MustParseTemplate("{header.Idempotency-Key}"), MustParseTemplate("{body.event.id}")}
	h := http.Header{"Idempotency-Key": {`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "Content-Type": {"application/json"}}
	body := benchBody(1 << 10)
	b.ReportAllocs()
	for b.Loop() {
		in := NewInput("POST", h, "", body)
		key, _, err := DeriveKey(templates, in)
		if err != nil || key == "" {
			b.Fatal(key, err)
		}
		sink = key
	}
}

func benchDeriveKeyBody(b *testing.B, size int) {
	templates := []Template{MustParseTemplate("{header.Idempotency-Key}"), MustParseTemplate("{body.event.id}:{body.event.type}")}
	h := http.Header{"Content-Type": {"application/json"}}
	body := benchBody(size)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		in := NewInput("POST", h, "", body)
		key, idx, err := DeriveKey(templates, in)
		if err != nil || idx != 1 {
			b.Fatal(key, err)
		}
		sink = key
	}
}

func BenchmarkDeriveKeyBody1KB(b *testing.B)  { benchDeriveKeyBody(b, 1<<10) }
func BenchmarkDeriveKeyBody64KB(b *testing.B) { benchDeriveKeyBody(b, 64<<10) }

func benchFingerprint(b *testing.B, size int, rule FingerprintRule) {
	h := http.Header{"Content-Type": {"application/json"}}
	body := benchBody(size)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		in := NewInput("POST", h, "", body)
		fp, err := Fingerprint("POST", "create_crm_deal", in, rule)
		if err != nil {
			b.Fatal(err)
		}
		sink = fp
	}
}

func BenchmarkFingerprint1KB(b *testing.B)  { benchFingerprint(b, 1<<10, FingerprintRule{}) }
func BenchmarkFingerprint64KB(b *testing.B) { benchFingerprint(b, 64<<10, FingerprintRule{}) }

// The SPEC example rule: a few selected fields and one volatile one ignored.
var specRule = FingerprintRule{Body: []string{"amount", "currency", "customer_id"}, Ignore: []string{"meta.delivery_attempt"}}

func BenchmarkFingerprintRule1KB(b *testing.B)  { benchFingerprint(b, 1<<10, specRule) }
func BenchmarkFingerprintRule64KB(b *testing.B) { benchFingerprint(b, 64<<10, specRule) }

// BenchmarkRequest is the whole keying work of one guarded request: key,
// scope, key id and fingerprint over one Input.
func BenchmarkRequest1KB(b *testing.B) {
	templates := []Template{MustParseTemplate("{header.Idempotency-Key}"), MustParseTemplate("{body.event.id}:{body.event.type}")}
	scope := []Template{MustParseTemplate("{header.Authorization}")}
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk_test_123"}}
	body := benchBody(1 << 10)
	ids := benchIDKey(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		in := NewInput("POST", h, "", body)
		key, _, err := DeriveKey(templates, in)
		if err != nil {
			b.Fatal(err)
		}
		if err := ValidateKey(key); err != nil {
			b.Fatal(err)
		}
		id := ids.KeyID("create_crm_deal", ScopeHash(scope, in), key)
		fp, err := Fingerprint("POST", "create_crm_deal", in, specRule)
		if err != nil {
			b.Fatal(err)
		}
		sink = id + fp
	}
}

func BenchmarkCanonicalize64KB(b *testing.B) {
	body := benchBody(64 << 10)
	dst := make([]byte, 0, len(body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = Canonicalize(dst[:0], body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCanonicalizeDeep measures the worst case the depth bound allows:
// 1 MiB under MaxDepth levels of nesting, each of which re-scans its contents.
func BenchmarkCanonicalizeDeep1MB(b *testing.B) {
	inner := strings.Repeat(`"xxxxxxxxxxxxxx",`, (1<<20)/17)
	body := []byte(strings.Repeat("[", MaxDepth) + inner + "1" + strings.Repeat("]", MaxDepth))
	dst := make([]byte, 0, len(body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = Canonicalize(dst[:0], body); err != nil {
			b.Fatal(err)
		}
	}
}

func benchIDKey(b *testing.B) *IDKey {
	k, err := NewIDKey([]byte("bench-deployment-secret-0123456789"))
	if err != nil {
		b.Fatal(err)
	}
	return k
}

func BenchmarkKeyID(b *testing.B) {
	var scope [32]byte
	ids := benchIDKey(b)
	b.ReportAllocs()
	for b.Loop() {
		sink = ids.KeyID("create_crm_deal", scope, "8e03978e-40d5-43e8-bc93-6894a57f9324")
	}
}

// BenchmarkKeyIDParallel is KeyID from every CPU at once, as the handler
// calls it.
func BenchmarkKeyIDParallel(b *testing.B) {
	var scope [32]byte
	ids := benchIDKey(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if len(ids.KeyID("create_crm_deal", scope, "8e03978e-40d5-43e8-bc93-6894a57f9324")) != 32 {
				b.Fail()
			}
		}
	})
}

// benchCheckDepth is the nesting check every body goes through before it is
// parsed: its cost on the normal path.
func benchCheckDepth(b *testing.B, size int) {
	body := benchBody(size)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := checkDepth(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckDepth1KB(b *testing.B)  { benchCheckDepth(b, 1<<10) }
func BenchmarkCheckDepth64KB(b *testing.B) { benchCheckDepth(b, 64<<10) }
