package embedded_test

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
	"github.com/idemgate/idemgate/store/storetest"
)

func open(t testing.TB, dir string) *embedded.Engine {
	t.Helper()
	e, err := embedded.Open(embedded.Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestConformance runs the engine contract on the embedded engine.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) store.Engine { return open(t, t.TempDir()) },
		Now:  func(t testing.TB, e store.Engine) time.Time { return e.(*embedded.Engine).Now() },
		TTL: func(t testing.TB, e store.Engine, id string) time.Duration {
			le := e.(*embedded.Engine)
			exp := le.ExpiresAt(id)
			if exp.IsZero() {
				return 0
			}
			return exp.Sub(le.Now())
		},
	})
}
