package problem

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestProblemWrite(t *testing.T) {
	t.Parallel()
	p := InFlight.With("retry later", "create_deal")
	w := httptest.NewRecorder()
	if err := p.Write(w); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("body %s: %v", w.Body, err)
	}
	if w.Code != 409 || got["type"] != Base+"in-flight" || got["title"] != "A request is outstanding for this Idempotency-Key" ||
		got["status"] != 409.0 || got["detail"] != "retry later" || got["route"] != "create_deal" || len(got) != 5 {
		t.Errorf("write: %d %s", w.Code, w.Body)
	}
	for name, v := range map[string]string{
		"Content-Type": "application/problem+json", "Content-Length": strconv.Itoa(w.Body.Len()),
		"Cache-Control": "no-store", "Retry-After": "1",
	} {
		if got := w.Header().Get(name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
}
