package signature

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
)

// Stripe publishes no test vector. This one is built as Stripe signs:
// the hex HMAC-SHA256, keyed by the whole whsec_ string, of
// "1700000000." followed by the body. The constant was computed apart
// (Python's hmac module) and stripeSig must agree with it.
const (
	stripeSecret = "whsec_idemgate_test_secret"
	stripeBody   = `{"id":"evt_1","object":"event"}`
	stripeV1     = "da2c2764d310dda0d0c4145ca7ef090ff574ff991c3c69ce0c8e86468dd5b001"
)

func TestStripe(t *testing.T) {
	if got := stripeSig(stripeSecret, "1700000000", stripeBody); got != stripeV1 {
		t.Fatalf("the construction gives %s, want %s", got, stripeV1)
	}
	v := newVerifier(t, flat(config.SchemeStripe, "{env.STRIPE}"), env{"{env.STRIPE}": stripeSecret})
	now := time.Unix(1700000000, 0)
	sig := func(value string) []string { return []string{"Stripe-Signature", value} }
	valid := "t=1700000000,v1=" + stripeV1
	other := strings.Repeat("ab", 32)
	check(t, v, []vector{
		{"valid", sig(valid), stripeBody, now, "stripe:default", ""},
		{"valid, with a v0 and spaces", sig("t=1700000000, v1=" + stripeV1 + ", v0=" + other), stripeBody, now, "stripe:default", ""},
		{"valid, another v1 first", sig("t=1700000000,v1=" + other + ",v1=" + stripeV1), stripeBody, now, "stripe:default", ""},
		{"valid, upper-case hex", sig("t=1700000000,v1=" + strings.ToUpper(stripeV1)), stripeBody, now, "stripe:default", ""},
		{"at the tolerance's past edge", sig(valid), stripeBody, now.Add(5 * time.Minute), "stripe:default", ""},
		{"at the tolerance's future edge", sig(valid), stripeBody, now.Add(-5 * time.Minute), "stripe:default", ""},
		{"tampered body", sig(valid), `{"id":"evt_2","object":"event"}`, now, "", Mismatch},
		{"tampered signature", sig("t=1700000000,v1=" + other), stripeBody, now, "", Mismatch},
		{"tampered timestamp", sig("t=1700000001,v1=" + stripeV1), stripeBody, now, "", Mismatch},
		{"expired", sig(valid), stripeBody, now.Add(5*time.Minute + time.Second), "", Timestamp},
		{"from the future", sig(valid), stripeBody, now.Add(-5*time.Minute - time.Second), "", Timestamp},
		{"no timestamp", sig("v1=" + stripeV1), stripeBody, now, "", Timestamp},
		{"missing header", nil, stripeBody, now, "", Missing},
		{"empty header", sig(""), stripeBody, now, "", Missing},
		{"only v0", sig("t=1700000000,v0=" + stripeV1), stripeBody, now, "", Malformed},
		{"v1 not hex", sig("t=1700000000,v1=zz"), stripeBody, now, "", Malformed},
		{"v1 too short", sig("t=1700000000,v1=" + stripeV1[:62]), stripeBody, now, "", Malformed},
		{"timestamp twice", sig("t=1700000000,t=1700000000,v1=" + stripeV1), stripeBody, now, "", Malformed},
		{"timestamp not a number", sig("t=soon,v1=" + stripeV1), stripeBody, now, "", Malformed},
		{"timestamp with a sign", sig("t=+1700000000,v1=" + stripeV1), stripeBody, now, "", Malformed},
		{"timestamp with a leading zero", sig("t=01700000000,v1=" + stripeV1), stripeBody, now, "", Malformed},
		{"an item without =", sig("t=1700000000,v1=" + stripeV1 + ",junk"), stripeBody, now, "", Malformed},
		{"header twice", append(sig(valid), sig(valid)...), stripeBody, now, "", Malformed},
		{"oversized header", sig(valid + ",v0=" + strings.Repeat("a", MaxHeaderLen)), stripeBody, now, "", Malformed},
		{"too many signatures", sig("t=1700000000" + strings.Repeat(",v1="+other, MaxSignatures) + ",v1=" + stripeV1), stripeBody, now, "", Malformed},
	})
}
