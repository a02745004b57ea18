package caddymodule

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"strconv"
	"testing"
)

// TestProblemJSONMatchesEncodingJSON: the hand-written encoder gives the
// bytes encoding/json gives, for every problem and every kind of string.
func TestProblemJSONMatchesEncodingJSON(t *testing.T) {
	tricky := []string{
		"", "plain", `quote " backslash \ slash /`, "<script>&amp;</script>",
		"tab\tnl\ncr\rbs\bff\f nul\x00 us\x1f del\x7f", "é ü 日本 🙂", "\u2028\u2029 line seps",
		"bad utf8 \xff\xfe end", "truncated \xe6\x97", "\xed\xa0\x80 surrogate", "\ufffd replacement",
	}
	var problems []problem
	for _, base := range []problem{probKeyMissing, probKeyInvalid, probBadJSON, probBadBody, probTooLarge,
		probKeyReused, probInFlight, probUnknown, probStoreDown} {
		problems = append(problems, base, base.with("detail", "route"))
		for _, s := range tricky {
			p := base.with(s, s)
			p.RecordID = s
			p.Tried = []string{s, "{header.Idempotency-Key}", "{body.a<b>}"}
			problems = append(problems, p)
		}
	}
	// Random strings over an alphabet heavy in characters that need care.
	alphabet := []string{"a", "Z", " ", `"`, `\`, "<", ">", "&", "\n", "\x01", "\x7f", "é", "日", "\u2028", "\xff", "\xc3", "🙂"}
	rng := rand.New(rand.NewPCG(5, 7))
	for range 2000 {
		var b bytes.Buffer
		for range rng.IntN(12) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		p := probInFlight.with(b.String(), "r")
		problems = append(problems, p)
	}
	for i, p := range problems {
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.appendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("problem %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func TestProblemWrite(t *testing.T) {
	p := probInFlight.with("retry later", "create_deal")
	w := httptest.NewRecorder()
	if err := p.write(w); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(p)
	if w.Code != 409 || w.Body.String() != string(want) {
		t.Errorf("write: %d %s, want 409 %s", w.Code, w.Body, want)
	}
	for name, v := range map[string]string{
		"Content-Type": "application/problem+json", "Content-Length": strconv.Itoa(len(want)),
		"Cache-Control": "no-store", "Retry-After": "1",
	} {
		if got := w.Header().Get(name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
}
