package caddymodule

import (
	"net/http"

	"github.com/idemgate/idemgate/breaker"
	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/problem"
)

// breakers are the process's breakers (see breaker.Owner). Process-wide
// by nature, as the store pool is (see storepool.Default): a breaker outlives the
// config reloads that keep its route, and only a pool outside any one
// config can hand it from the old handler to the new one, as Caddy's
// reverse_proxy keeps its upstreams' state. Its keys name the server and
// the handler's place in it, so two configs loaded side by side (tests,
// two sites) never share one.
var breakers = breaker.NewOwner()

// breakerOpen answers a new execution that the route's open breaker
// refuses: 503 with the seconds until the breaker lets a probe through.
func breakerOpen(op *guard.Operation, adm *guard.Admission, w http.ResponseWriter) (guard.Outcome, error) {
	p := problem.BreakerOpen.With("the upstream of route "+op.Route.Name+" failed repeatedly; new executions are paused and nothing was forwarded", op.Route.Name)
	p.RetryAfter = breaker.RetryAfter(adm.Refused)
	return guard.Refuse(op, w, guard.OutcomeBreakerOpen, p)
}
