package unrecorded

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/store"
)

// TestCompletionsBound: what is kept stays within both bounds, the newest
// completion of a record is the one found, and forgetting gives its room
// back.
func TestCompletionsBound(t *testing.T) {
	t.Parallel()
	type result struct{ name string }
	k := New[result](2, 100, prometheus.NewGauge(prometheus.GaugeOpts{Name: "n"}), prometheus.NewGauge(prometheus.GaugeOpts{Name: "b"}))
	var e store.Engine
	a, b, c, a2 := &result{"a"}, &result{"b"}, &result{"c"}, &result{"a2"}
	if got := k.Find(Key{e, "a"}); got != nil {
		t.Fatalf("found %v with nothing kept", got)
	}
	for _, step := range []struct {
		key  string
		v    *result
		size int64
		want bool
	}{
		{"a", a, 60, true},
		{"b", b, 41, false}, // 101 bytes
		{"b", b, 40, true},
		{"c", c, 0, false}, // a third
	} {
		if got := k.Keep(Key{e, step.key}, step.v, step.size); got != step.want {
			t.Errorf("Keep(%s, %d bytes) = %v, want %v", step.v.name, step.size, got, step.want)
		}
	}
	if n, size := k.Count(); n != 2 || size != 100 {
		t.Fatalf("Count = %d, %d; want 2, 100", n, size)
	}
	k.Forget(a)
	k.Forget(a) // once only
	if got := k.Find(Key{e, "a"}); got != nil {
		t.Fatalf("found %v once forgotten", got.name)
	}
	if !k.Keep(Key{e, "a"}, a2, 60) || k.Find(Key{e, "a"}) != a2 {
		t.Fatal("the room a forgotten completion left was not given back")
	}
	k.Forget(b)
	if n, size := k.Count(); n != 1 || size != 60 {
		t.Fatalf("Count = %d, %d; want 1, 60", n, size)
	}
}
