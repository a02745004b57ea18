package config

import (
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// Values of Policy.OnUnknownOutcome: what happens when the gateway cannot
// know whether the upstream performed the side effect (a 5xx, a timeout or
// reset after the request was sent, a lease that ran out).
const (
	// OnUnknownHold keeps the record as "outcome unknown" until an operator
	// resolves it; retries get 409. The default.
	OnUnknownHold = "hold"
	// OnUnknownRelease releases the claim so the next retry executes (for
	// upstreams that honour the forwarded key themselves).
	OnUnknownRelease = "release"
	// OnUnknownStore stores the failure and replays it like any result.
	OnUnknownStore = "store"
)

// Values of Policy.OnStoreError: what happens when the record store cannot
// be reached.
const (
	// OnStoreErrorFailClosed answers 503 without calling the upstream. The
	// default.
	OnStoreErrorFailClosed = "fail_closed"
	// OnStoreErrorFailOpen forwards the request unguarded (and counts it).
	OnStoreErrorFailOpen = "fail_open"
)

// Built-in defaults, used where neither a route nor the rules' defaults set
// a field.
const (
	defaultTTL              = 24 * time.Hour
	defaultLockLease        = 30 * time.Second
	defaultHoldTTL          = 720 * time.Hour
	defaultRequireKey       = true
	defaultMaxBody          = 1 << 20
	defaultMaxResponse      = 1 << 20
	defaultScope            = "{header.Authorization}"
	defaultForwardKeyHeader = "Idempotency-Key"
	defaultOnUnknownOutcome = OnUnknownHold
	defaultOnStoreError     = OnStoreErrorFailClosed
)

var (
	defaultRetryStatuses = []int{429, 503}
	defaultMethods       = []string{"POST", "PUT", "PATCH", "DELETE"}
)

// Policy is the part of a route's rules that can also be set once under
// "defaults". Every field is optional: a zero value (nil for pointers and
// slices) inherits the value from the rules' defaults, and then from the
// built-in default named in the field's comment.
//
// For the slices an explicitly empty list is not the same as an absent one:
// "scope: []" means no scope and "retry_statuses: []" means no status
// releases the claim. Their JSON tags use omitzero so that the difference
// survives a round trip through Caddy's JSON.
type Policy struct {
	// TTL is how long a completed result is replayed; at least 1s.
	// Default 24h.
	TTL Duration `json:"ttl,omitempty" mapstructure:"ttl"`
	// LockLease is how long an in-flight claim lives without renewal; at
	// least 1s, and longer than the store's op_timeout. Default 30s.
	LockLease Duration `json:"lock_lease,omitempty" mapstructure:"lock_lease"`
	// HoldTTL is how long a record held as outcome unknown is kept; at
	// least LockLease (an in-flight record lives HoldTTL). Default 720h
	// (30 days).
	HoldTTL Duration `json:"hold_ttl,omitempty" mapstructure:"hold_ttl"`
	// RequireKey: true answers 400 when no key can be derived; false lets
	// such requests pass through unguarded. Default true.
	RequireKey *bool `json:"require_key,omitempty" mapstructure:"require_key"`
	// MaxBody is the largest request body accepted (larger: 413); at most
	// 64MiB. Default 1MiB.
	MaxBody Size `json:"max_body,omitempty" mapstructure:"max_body"`
	// MaxResponse is the largest response body stored; larger responses
	// are streamed and stored as status, headers and digest only.
	// Default 1MiB.
	MaxResponse Size `json:"max_response,omitempty" mapstructure:"max_response"`
	// Scope templates are resolved and hashed into every key, so keys never
	// collide across clients. Default ["{header.Authorization}"]; an
	// explicit empty list means no scope.
	Scope []string `json:"scope,omitzero" mapstructure:"scope"`
	// ForwardKeyHeader is the request header that carries the derived key
	// upstream. Default "Idempotency-Key"; "" means the key is not
	// forwarded. It may not name a header the request needs for itself
	// (Authorization, Host, Content-Length, Content-Type, Cookie,
	// Transfer-Encoding) or a hop-by-hop header.
	ForwardKeyHeader *string `json:"forward_key_header,omitempty" mapstructure:"forward_key_header"`
	// RetryStatuses are upstream statuses that mean "not done": the claim
	// is released and the next retry executes. Each 3xx, 4xx or 5xx.
	// Default [429, 503]; an explicit empty list means none.
	RetryStatuses []int `json:"retry_statuses,omitzero" mapstructure:"retry_statuses"`
	// OnUnknownOutcome is hold (default), release or store; see the
	// OnUnknown constants.
	OnUnknownOutcome string `json:"on_unknown_outcome,omitempty" mapstructure:"on_unknown_outcome"`
	// OnStoreError is fail_closed (default) or fail_open; see the
	// OnStoreError constants.
	OnStoreError string `json:"on_store_error,omitempty" mapstructure:"on_store_error"`
}

// Match selects the requests a route guards.
type Match struct {
	// Methods are the guarded methods. Default [POST, PUT, PATCH, DELETE].
	// Safe methods (GET, HEAD, OPTIONS, TRACE) are never guarded and are
	// rejected here. Methods are compared in upper case.
	Methods []string `json:"methods,omitzero" mapstructure:"methods"`
	// Path is required: a path pattern in the syntax of Caddy's path
	// matcher ("/crm/deals", "/crm/deals/*", "/orders/*/refund"),
	// starting with "/". Caddy matches it case-insensitively.
	Path string `json:"path,omitempty" mapstructure:"path"`
}

// Fingerprint selects what of the request body counts when deciding
// whether a retry carries the same payload as the first request.
type Fingerprint struct {
	// Body lists JSON paths (gjson syntax); when set, only these fields
	// count. Default: the whole canonical body.
	Body []string `json:"body,omitempty" mapstructure:"body"`
	// Ignore lists JSON paths dropped before fingerprinting (volatile
	// fields like delivery attempts).
	Ignore []string `json:"ignore,omitempty" mapstructure:"ignore"`
	// Query: the query string, its parameters sorted, counts in the
	// fingerprint (true, the default); false leaves it out.
	Query *bool `json:"query,omitempty" mapstructure:"query"`
}

// Route is one route rule. Routes are matched in order; the first that
// matches a request guards it.
type Route struct {
	// Name is required and unique: 1 to 64 of A-Z a-z 0-9 _ . : -
	Name string `json:"name,omitempty" mapstructure:"name"`
	// Operation is the namespace of the route's keys (default: Name). Routes
	// with the same operation share keys. Same character set as Name.
	Operation string `json:"operation,omitempty" mapstructure:"operation"`
	// Match selects the guarded requests; Match.Path is required.
	Match Match `json:"match,omitzero" mapstructure:"match"`
	// Key lists key templates such as "{header.Idempotency-Key}" or
	// "{body.event.id}:{body.event.type}"; the first whose placeholders all
	// resolve wins. At least one is required.
	Key []string `json:"key,omitempty" mapstructure:"key"`
	// Fingerprint selects the payload fields that must match on a retry.
	Fingerprint Fingerprint `json:"fingerprint,omitzero" mapstructure:"fingerprint"`
	// ExternalID is a JSON path (gjson syntax) into the upstream's JSON
	// response; the value found there is recorded with the result.
	ExternalID string `json:"external_id,omitempty" mapstructure:"external_id"`
	// Policy holds the route's own policy fields, written inline beside
	// the fields above (in YAML and in JSON alike).
	Policy `mapstructure:",squash"`
}

// Rules are the route rules: a defaults policy and the routes. It is the
// schema of the YAML rules file and of the handler's inline JSON config.
type Rules struct {
	// Defaults is the policy every route inherits.
	Defaults Policy `json:"defaults,omitzero" mapstructure:"defaults"`
	// Routes are the route rules, matched in order. At least one.
	Routes []Route `json:"routes,omitempty" mapstructure:"routes"`
}

// Resolved is a route with every policy field filled in from the route,
// then the rules' defaults, then the built-in defaults, and its templates
// compiled. Its slices are its own: changing them does not change the Rules.
// Empty lists are nil.
type Resolved struct {
	Name      string
	Operation string   // the route's operation, or its name
	Methods   []string // upper case
	Path      string

	Key         []keying.Template
	Scope       []keying.Template // nil when the scope is an explicit []
	Fingerprint keying.FingerprintRule
	ExternalID  string

	TTL              time.Duration
	LockLease        time.Duration
	HoldTTL          time.Duration
	RequireKey       bool
	MaxBody          int64
	MaxResponse      int64
	ForwardKeyHeader string // "" when the key is not forwarded
	RetryStatuses    []int  // nil when retry_statuses is an explicit []
	OnUnknownOutcome string // one of the OnUnknown constants
	OnStoreError     string // one of the OnStoreError constants
}

// Resolve validates the rules and returns the routes, in order, with every
// policy field filled in. Errors are an ErrorList of field-path problems
// (see Validate).
func (r *Rules) Resolve() ([]Resolved, error) { return r.ResolveWith(Limits{}) }

// ResolveWith is Resolve, also checking the rules against l.
func (r *Rules) ResolveWith(l Limits) ([]Resolved, error) {
	if err := r.ValidateWith(l); err != nil {
		return nil, err
	}
	out := make([]Resolved, len(r.Routes))
	var errs errorList
	for i := range r.Routes {
		res, err := resolveRoute(&r.Routes[i], &r.Defaults)
		if err != nil {
			// Unreachable after Validate, which parses every template.
			errs.add(routeField(i, "key"), "%v", err)
			continue
		}
		out[i] = res
	}
	if err := errs.list.err(); err != nil {
		return nil, err
	}
	return out, nil
}

func resolveRoute(rt *Route, def *Policy) (Resolved, error) {
	res := Resolved{
		Name:       rt.Name,
		Operation:  first(rt.Operation, rt.Name),
		Path:       rt.Match.Path,
		ExternalID: rt.ExternalID,

		TTL:              time.Duration(first(rt.TTL, def.TTL, Duration(defaultTTL))),
		LockLease:        time.Duration(first(rt.LockLease, def.LockLease, Duration(defaultLockLease))),
		HoldTTL:          time.Duration(first(rt.HoldTTL, def.HoldTTL, Duration(defaultHoldTTL))),
		RequireKey:       *firstPtr(rt.RequireKey, def.RequireKey, ptr(defaultRequireKey)),
		MaxBody:          int64(first(rt.MaxBody, def.MaxBody, defaultMaxBody)),
		MaxResponse:      int64(first(rt.MaxResponse, def.MaxResponse, defaultMaxResponse)),
		ForwardKeyHeader: *firstPtr(rt.ForwardKeyHeader, def.ForwardKeyHeader, ptr(defaultForwardKeyHeader)),
		OnUnknownOutcome: first(rt.OnUnknownOutcome, def.OnUnknownOutcome, defaultOnUnknownOutcome),
		OnStoreError:     first(rt.OnStoreError, def.OnStoreError, defaultOnStoreError),
	}

	methods := rt.Match.Methods
	if methods == nil {
		methods = defaultMethods
	}
	res.Methods = make([]string, len(methods))
	for i, m := range methods {
		res.Methods[i] = strings.ToUpper(m)
	}

	res.RetryStatuses = cloneOrNil(firstSlice(rt.RetryStatuses, def.RetryStatuses, defaultRetryStatuses))

	var err error
	if res.Key, err = parseTemplates(rt.Key); err != nil {
		return Resolved{}, err
	}
	scope := firstSlice(rt.Scope, def.Scope, []string{defaultScope})
	if res.Scope, err = parseTemplates(scope); err != nil {
		return Resolved{}, err
	}

	res.Fingerprint = keying.FingerprintRule{
		Body:   cloneOrNil(rt.Fingerprint.Body),
		Ignore: cloneOrNil(rt.Fingerprint.Ignore),
		Query:  rt.Fingerprint.Query == nil || *rt.Fingerprint.Query,
	}
	return res, nil
}

func parseTemplates(src []string) ([]keying.Template, error) {
	if len(src) == 0 {
		return nil, nil
	}
	out := make([]keying.Template, len(src))
	for i, s := range src {
		t, err := keying.ParseTemplate(s)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// first returns the first non-zero value.
func first[T comparable](vals ...T) T {
	var zero T
	for _, v := range vals {
		if v != zero {
			return v
		}
	}
	return zero
}

// firstPtr returns the first non-nil pointer.
func firstPtr[T any](vals ...*T) *T {
	for _, v := range vals {
		if v != nil {
			return v
		}
	}
	return nil
}

// firstSlice returns the first non-nil slice: an empty, non-nil slice is an
// explicit "none" and wins over later ones.
func firstSlice[T any](vals ...[]T) []T {
	for _, v := range vals {
		if v != nil {
			return v
		}
	}
	return nil
}

// cloneOrNil copies s; an empty s gives nil, so that Resolved values compare
// equal however their rules were written.
func cloneOrNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

func ptr[T any](v T) *T { return &v }
