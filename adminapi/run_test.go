package adminapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
)

// breakerOpen is the Actions of a store whose route's breaker is open.
type breakerOpen struct{ operator.Actions }

func (breakerOpen) Run(_ context.Context, rec *store.Record, _ store.Action) (*store.Record, int, error) {
	return rec, 0, &operator.BreakerOpenError{Route: rec.Route, Wait: 1500 * time.Millisecond}
}

// TestAdminRunBreakerOpen: a run that the route's open breaker refuses is
// answered 503 with the breaker's wait as Retry-After, rounded up.
func TestAdminRunBreakerOpen(t *testing.T) {
	t.Parallel()
	h := newHandler(t, operatorTestRules, &embedded.Module{Dir: t.TempDir()})
	id := storedRecord(t, h, "held", store.Result{})
	a := &AdminAPI{stores: func() []operator.LiveStore {
		ls := h.LiveStore()
		ls.Actions = breakerOpen{ls.Actions}
		return []operator.LiveStore{ls}
	}}
	req := httptest.NewRequest("POST", "/idempotency/records/"+id+"/run", strings.NewReader(`{"reason":"the upstream is back"}`))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	var ae caddy.APIError
	if err := a.Routes()[0].Handler.ServeHTTP(w, req); !errors.As(err, &ae) || ae.HTTPStatus != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("POST .../run with the breaker open: %v, Retry-After %q; want 503 with Retry-After 2", err, w.Header().Get("Retry-After"))
	}
}
