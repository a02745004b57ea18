package guard

import "testing"

// TestWaitPlaces: a waiter takes a place while fewer than
// maxWaitersPerKey wait on its record and fewer than maxWaitersPerProcess
// in all; a place given back is free again.
func TestWaitPlaces(t *testing.T) {
	// Steps: take n places for key (want: what the last take said),
	// or give n back.
	type step struct {
		do   string // take | give
		key  string
		n    int
		want string
	}
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"per key", []step{
			{"take", "a", maxWaitersPerKey, ""},
			{"take", "a", 1, waitFullKey},
			{"take", "b", 1, ""},
			{"give", "a", 1, ""},
			{"take", "a", 1, ""},
			{"take", "a", 1, waitFullKey},
		}},
		{"per process", []step{
			{"take", "a", maxWaitersPerKey, ""},
			{"take", "b", maxWaitersPerKey, ""},
			{"take", "c", maxWaitersPerKey, ""},
			{"take", "d", maxWaitersPerKey, ""},
			{"take", "e", maxWaitersPerKey, ""},
			{"take", "f", maxWaitersPerKey, ""},
			{"take", "g", maxWaitersPerKey, ""},
			{"take", "h", maxWaitersPerProcess - 7*maxWaitersPerKey, ""},
			{"take", "i", 1, waitFullProcess},
			{"take", "a", 1, waitFullKey},
			{"give", "b", 1, ""},
			{"take", "i", 1, ""},
			{"take", "j", 1, waitFullProcess},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &waitPlaces{byKey: map[string]int{}}
			for i, s := range tt.steps {
				var got string
				for range s.n {
					if s.do == "give" {
						p.give(s.key)
					} else {
						got = p.take(s.key)
					}
				}
				if got != s.want {
					t.Fatalf("step %d (%s %d %s): %q, want %q", i, s.do, s.n, s.key, got, s.want)
				}
			}
			for key := range p.byKey {
				for p.byKey[key] > 0 {
					p.give(key)
				}
			}
			if p.total != 0 || len(p.byKey) != 0 {
				t.Fatalf("all given back: total %d, keys %v", p.total, p.byKey)
			}
		})
	}
}
