package operator

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/store"
)

// ErrNoVerify: the record's route has no verify rule in the running
// config, so no check can run.
var ErrNoVerify = errors.New("the record's route has no verify rule in the running config")

// ErrNoChain: the gateway cannot re-drive yet: the handler is not in its
// config's HTTP routes or subroutes (handle_errors, a named route), and
// no request has reached the record's route since its config was loaded.
var ErrNoChain = errors.New("the idempotency handler is not in a site's routes or subroutes, and no request has reached the route on this gateway since its config was loaded, so the handler chain a re-drive goes through is not known yet; try again after the route has served a request, or release the record and let the client retry")

// InvalidError is an operator request that the service refuses before
// any store sees it. It is a store.ErrInvalidArgument.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

// Unwrap makes an InvalidError a store.ErrInvalidArgument.
func (e *InvalidError) Unwrap() error { return store.ErrInvalidArgument }

// Invalid returns an InvalidError with the formatted message.
func Invalid(format string, args ...any) error {
	return &InvalidError{msg: fmt.Sprintf(format, args...)}
}

// Status is the one mapping of what went wrong with an operator request
// to its HTTP status, for the admin API and the console: 404 for a record
// that does not exist, 409 for one whose state refuses the action (a live
// call, a verification check holding it, no verify rule), 400 for a
// request the service or a store refuses, 503 when a store failed; 200
// for no error.
func Status(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrConflict), errors.Is(err, ErrNoVerify):
		return http.StatusConflict
	case errors.Is(err, store.ErrInvalidID), errors.Is(err, store.ErrInvalidArgument):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// BreakerOpenError: the route's breaker refuses new executions, an
// operator's re-drive among them, for Wait more.
type BreakerOpenError struct {
	Route string
	Wait  time.Duration
}

func (e *BreakerOpenError) Error() string {
	return fmt.Sprintf("route %s: the upstream is failing and its breaker pauses new executions, an operator's run among them, for %ds more; try again then", e.Route, e.RetryAfter())
}

// RetryAfter is Wait in whole seconds, rounded up, at least 1: the
// Retry-After of the refusal.
func (e *BreakerOpenError) RetryAfter() int {
	return max(1, int(math.Ceil(e.Wait.Seconds())))
}
