package config

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// OnUnknown is a value of Policy.OnUnknownOutcome: what happens when the
// gateway cannot know whether the upstream performed the side effect (a
// 5xx, a timeout or reset after the request was sent, a lease that ran out).
type OnUnknown string

const (
	OnUnknownHold    OnUnknown = "hold"    // keep the record as outcome unknown for an operator; retries get 409 (default)
	OnUnknownRelease OnUnknown = "release" // the next retry executes (for upstreams that honour the forwarded key)
	OnUnknownStore   OnUnknown = "store"   // store the failure and replay it like any result
)

// OnStoreError is a value of Policy.OnStoreError: what happens when the
// record store cannot be reached.
type OnStoreError string

const (
	OnStoreErrorFailClosed OnStoreError = "fail_closed" // answer 503 without calling the upstream (default)
	OnStoreErrorFailOpen   OnStoreError = "fail_open"   // forward the request unguarded, and count it
)

// OnRedirect is a value of Policy.OnRedirect: what a 307 or 308 from the
// upstream does to the claim. Such an answer asks for the same request at
// another URL: the upstream did nothing here.
type OnRedirect string

const (
	OnRedirectRelease OnRedirect = "release" // the claim is released; the redirected request executes under the same key (default)
	OnRedirectStore   OnRedirect = "store"   // the redirect is the operation's result, replayed like any other
)

// Mode is a value of Policy.Mode: whether a route's guard answers
// duplicates or only counts what it would have done.
type Mode string

const (
	ModeEnforce Mode = "enforce" // duplicates are replayed, refused or held (default)
	ModeObserve Mode = "observe" // records are made as in enforce, but every request is forwarded and answered by the upstream
)

// OnInFlight is a value of Policy.OnInFlight: what a duplicate gets while
// the first request with its key is still running.
type OnInFlight string

const (
	OnInFlightReject OnInFlight = "reject" // 409 at once, with Retry-After (default)
	OnInFlightWait   OnInFlight = "wait"   // wait up to in_flight_wait for the first to finish, then replay it
)

// Built-in defaults, for fields that neither a route nor "defaults" set.
const (
	defaultTTL          = 24 * time.Hour
	defaultLockLease    = 30 * time.Second
	defaultHoldTTL      = 720 * time.Hour
	defaultMaxBody      = 1 << 20
	defaultMaxResponse  = 1 << 20
	defaultScope        = "{header.Authorization}"
	defaultInFlightWait = 5 * time.Second
)

var (
	defaultConfirm          = false
	defaultShowUnparsed     = false
	defaultRequireKey       = true
	defaultForwardKeyHeader = "Idempotency-Key"
	// defaultRetryStatuses are the answers that say the upstream did not
	// carry the request out: not authenticated or not allowed (401, 403),
	// no such resource or method here (404, 405), the request timed out
	// or was too large, of a type or too early or with headers too large
	// to be read (408, 413, 415, 425, 431), and come back later (429,
	// 503). 400 and 422 are results: the request was read and refused.
	defaultRetryStatuses = []int{401, 403, 404, 405, 408, 413, 415, 425, 429, 431, 503}
	defaultMethods       = []string{"POST", "PUT", "PATCH", "DELETE"}
)

// Policy is the part of a route's rules that can also be set under
// "defaults". A zero value (nil for pointers and slices; an empty list is
// set) inherits from the defaults, then from the built-in default.
type Policy struct {
	// TTL is how long a completed result is replayed; at least 1s. Default 24h.
	TTL Duration `json:"ttl,omitempty"`
	// LockLease is how long an in-flight claim lives without renewal; at
	// least 1s, and longer than the store's op_timeout. Default 30s.
	LockLease Duration `json:"lock_lease,omitempty"`
	// HoldTTL is how long a record held as outcome unknown is kept; at
	// least LockLease (an in-flight record lives HoldTTL). Default 720h.
	HoldTTL Duration `json:"hold_ttl,omitempty"`
	// RequireKey: true answers 400 when no key can be derived; false lets
	// such requests pass unguarded. Default true.
	RequireKey *bool `json:"require_key,omitempty"`
	// MaxBody is the largest request body (larger: 413); at most 64MiB. Default 1MiB.
	MaxBody Size `json:"max_body,omitempty"`
	// MaxResponse is the largest response body stored; larger ones are
	// streamed and stored as status, headers and digest. Default 1MiB.
	MaxResponse Size `json:"max_response,omitempty"`
	// Scope templates are resolved and hashed into every key, so keys never
	// collide across clients; [] means none. Default ["{header.Authorization}"].
	Scope []string `json:"scope,omitzero"`
	// ForwardKeyHeader carries the derived key upstream ("" forwards none); not a
	// header the request needs itself, nor hop-by-hop. Default Idempotency-Key.
	ForwardKeyHeader *string `json:"forward_key_header,omitempty"`
	// RetryStatuses are upstream statuses (3xx to 5xx) that mean "not
	// done": the upstream did not carry the request out, so the claim is
	// released for the next retry (counted against retry.max_executions);
	// [] means none. Default [401, 403, 404, 405, 408, 413, 415, 425,
	// 429, 431, 503]: not authenticated, not allowed, not found, not
	// read, come back later. Any other status below 500 (400 and 422
	// among them: the request was read and refused) is a result, stored
	// and replayed.
	RetryStatuses []int `json:"retry_statuses,omitzero"`
	// StoreStatuses are 4xx statuses stored and replayed as results even
	// though retry_statuses lists them, such as [404] for an upstream
	// whose 404 is final. The effective set released is retry_statuses
	// minus store_statuses. A status in both lists of one policy is an
	// error; one not released anyway is a warning. Default none.
	StoreStatuses []int `json:"store_statuses,omitzero"`
	// TombstoneTTL is how long a small tombstone (the record id, when it
	// completed, its outcome; never the body) outlives an expired
	// record, so that a retry arriving after the ttl is seen: counted in
	// idemgate_late_retries_total, logged, and handled by after_expiry.
	// 1s to 8760h, or 0s for no tombstones. Default 720h.
	TombstoneTTL *OptDuration `json:"tombstone_ttl,omitempty"`
	// AfterExpiry is what a retry that finds a tombstone gets: execute
	// (default: it runs again, as a new operation) or reject (409
	// problem+json expired, nothing forwarded).
	AfterExpiry AfterExpiry `json:"after_expiry,omitempty"`
	// SamePayloadWindow, when set, flags a request whose fingerprint
	// equals that of an operation completed on the same route and scope
	// within the window under another key (a sender that mints a new id
	// for every emission); on_same_payload says what then. 1s to 720h,
	// or 0s (the default): off.
	SamePayloadWindow *OptDuration `json:"same_payload_window,omitempty"`
	// OnSamePayload is what a request flagged by same_payload_window
	// gets: warn (default: it executes, counted and logged with both
	// record ids; identical orders happen), hold (held for an operator)
	// or reject (409 problem+json, nothing forwarded). Set without a
	// window it does nothing, with a warning.
	OnSamePayload OnSamePayload `json:"on_same_payload,omitempty"`
	// OnUnknownOutcome is hold (default), release or store.
	OnUnknownOutcome OnUnknown `json:"on_unknown_outcome,omitempty"`
	// OnRedirect is what a 307 or 308 from the upstream does: release
	// (default; the upstream did nothing here, and the redirected request
	// executes under the same key) or store (a result, replayed). 301,
	// 302 and 303 are always results.
	OnRedirect OnRedirect `json:"on_redirect,omitempty"`
	// OnStoreError is fail_closed (default) or fail_open.
	OnStoreError OnStoreError `json:"on_store_error,omitempty"`
	// Confirm: true makes the operator console ask for every action on the
	// route's records (release, complete) a second time. Default false.
	Confirm *bool `json:"confirm,omitempty"`
	// RedactFields names more fields (JSON members, URL-encoded form
	// fields; case-insensitive, whole names) whose values the admin API
	// and the console hide in stored bodies, beyond the built-in
	// credential-like names (password, secret, token, api_key, …). The
	// route's names add to those under defaults.
	RedactFields []string `json:"redact_fields,omitempty"`
	// ShowUnparsedBodies: true makes the admin API and the console show
	// the stored bodies they cannot redact field by field (XML,
	// multipart, other text; bytes as base64 in the admin API) as they
	// are, credentials and all. Default false: such a body is shown only
	// as its size and SHA-256. JSON, NDJSON and URL-encoded forms are
	// always shown, redacted.
	ShowUnparsedBodies *bool `json:"show_unparsed_bodies,omitempty"`
	// Retry is the retry budget and the circuit breaker (see Retry).
	Retry *Retry `json:"retry,omitempty"`
	// Owner names who resolves the route's held operations (a team, a
	// rota): shown in the console, the record view, log lines and problem
	// bodies. At most 128 characters.
	Owner string `json:"owner,omitempty"`
	// KeepRequest: true keeps each request (method, target, body, and of
	// its headers only Content-Type, Content-Encoding, Accept, those the
	// route's key templates read and KeepHeaders) with its record,
	// encrypted under a key derived from the handler's secret, so an
	// operator can run the operation again through the guarded path
	// ("Run now"). Dropped when the record completes or expires. A
	// handler with such a route needs its secret in the config. Default
	// false.
	KeepRequest *bool `json:"keep_request,omitempty"`
	// KeepHeaders names more request headers a kept request carries
	// (case-insensitive), such as a tracing or tenant header the
	// upstream needs on a re-drive. Not Authorization, Proxy-Authorization
	// or Cookie (the caller's credentials are never kept: a re-drive gets
	// the gateway's own from RedriveHeaders), nor a header the gateway
	// sets itself (Host, Content-Length, hop-by-hop). Headers the route's
	// scope reads are never kept. The route's names add to those under
	// defaults.
	KeepHeaders []string `json:"keep_headers,omitempty"`
	// RedriveHeaders are added to a re-drive's request, as the caller's
	// credentials are never kept: static text and {env.NAME} placeholders,
	// filled in when the config loads, e.g.
	// {"Authorization": "Bearer {env.CRM_TOKEN}"}.
	RedriveHeaders map[string]string `json:"redrive_headers,omitempty"`
	// Mode is enforce (default: duplicates are replayed, refused or held)
	// or observe: keys, fingerprints and records are made as in enforce,
	// but every request is forwarded and answered by the upstream, and
	// the decision log line and idemgate_observed_total say what enforce
	// would have done. A body over max_body is refused in both.
	Mode Mode `json:"mode,omitempty"`
	// OnInFlight is what a duplicate gets while the first request with
	// its key is still running: reject (default; 409 with Retry-After) or
	// wait (up to InFlightWait for the first to finish, then its replay).
	OnInFlight OnInFlight `json:"on_in_flight,omitempty"`
	// InFlightWait is how long a duplicate waits under on_in_flight:
	// wait; 10ms to 5m. Past it the duplicate gets the 409 it would have
	// had. Default 5s.
	InFlightWait Duration `json:"in_flight_wait,omitempty"`
}

// AfterExpiry is a value of Policy.AfterExpiry: what a retry gets when
// it arrives after its record expired and finds its tombstone.
type AfterExpiry string

const (
	AfterExpiryExecute AfterExpiry = "execute" // it executes again, counted as a late retry (default)
	AfterExpiryReject  AfterExpiry = "reject"  // 409 problem+json expired, nothing forwarded
)

// OnSamePayload is a value of Policy.OnSamePayload: what a request gets
// whose payload equals that of an operation completed within
// same_payload_window under another key.
type OnSamePayload string

const (
	OnSamePayloadWarn   OnSamePayload = "warn"   // it executes; counted and logged with both record ids (default)
	OnSamePayloadHold   OnSamePayload = "hold"   // held for an operator
	OnSamePayloadReject OnSamePayload = "reject" // 409 problem+json, nothing forwarded
)

// Built-in defaults and limits of retention.
const (
	defaultTombstoneTTL  = 720 * time.Hour
	maxTombstoneTTL      = 8760 * time.Hour
	maxSamePayloadWindow = 720 * time.Hour
)

// Match selects the requests a route guards.
type Match struct {
	// Methods are the guarded methods, in any case; not GET, HEAD, OPTIONS
	// or TRACE, which are never guarded. Default [POST, PUT, PATCH, DELETE].
	Methods []string `json:"methods,omitzero"`
	// Path is required: a pattern of Caddy's path matcher, such as
	// "/crm/deals" or "/orders/*/refund".
	Path string `json:"path,omitempty"`
	// Tools are the MCP tools the route guards (protocol: mcp, where
	// at least one is required): a JSON-RPC request tools/call whose
	// params.name is one of them. Names as the server lists them (case
	// matters), each once.
	Tools []string `json:"tools,omitempty"`
}

// Fingerprint selects what of the request counts when deciding whether a
// retry carries the same payload as the first request.
type Fingerprint struct {
	// Body lists JSON paths (gjson syntax); when set, only these fields
	// count. Default: the whole canonical body.
	Body []string `json:"body,omitempty"`
	// Ignore lists plain JSON paths (no queries, wildcards or modifiers)
	// dropped before fingerprinting: volatile fields like delivery attempts.
	Ignore []string `json:"ignore,omitempty"`
	// Query: the query string, its parameters sorted, counts (true, the
	// default); false leaves it out.
	Query *bool `json:"query,omitempty"`
}

// Route is one route rule. Routes are matched in order; the first that
// matches a request guards it.
type Route struct {
	// Name is required and unique: 1 to 64 of A-Z a-z 0-9 _ . : -
	Name string `json:"name,omitempty"`
	// Operation is the namespace of the route's keys (default: Name); routes
	// with the same operation share keys. Same characters as Name.
	Operation string `json:"operation,omitempty"`
	// Match selects the guarded requests.
	Match Match `json:"match,omitzero"`
	// Key lists key templates such as "{body.event.id}:{body.event.type}"; the
	// first whose placeholders all resolve wins. At least one is required.
	Key []string `json:"key,omitempty"`
	// Fingerprint selects the payload fields that must match on a retry.
	Fingerprint Fingerprint `json:"fingerprint,omitzero"`
	// ExternalID is a JSON path (gjson syntax) into the upstream's JSON
	// response; the value found there is recorded with the result.
	ExternalID string `json:"external_id,omitempty"`
	// Verify, when set, says how to look the operation up by its key when
	// its outcome is unknown, before an operator is needed (see Verify).
	Verify *Verify `json:"verify,omitempty"`
	// Protocol is what the endpoint speaks: http (the default: every
	// matched request is guarded) or mcp (an MCP server's Streamable
	// HTTP endpoint: only tool calls of match.tools are guarded, and the
	// gateway answers them in JSON-RPC; see docs/mcp.md).
	Protocol Protocol `json:"protocol,omitempty"`
	// OnToolError is what a tool result with isError: true means on a
	// route with protocol mcp: store (the default: the tool ran, and its
	// answer is replayed) or release (not done: the next retry runs the
	// tool again, counted against retry.max_executions).
	OnToolError OnToolError `json:"on_tool_error,omitempty"`
	// Signature, when set, is the webhook signature every request must
	// carry, checked before anything is claimed (see Signature). The
	// verified sender is then the route's scope, unless the route sets
	// scope itself (defaults.scope does not apply: it names API
	// clients, and a webhook carries no credentials of theirs). A
	// standard-webhooks route without a key is keyed by
	// {header.webhook-id}.
	Signature *Signature `json:"signature,omitempty"`
	// Sender names the route's webhook sender, a preset (package
	// signature/senders): stripe, github, shopify, slack, twilio,
	// paddle, square, standard-webhooks or svix. It sets the signature's
	// scheme and tolerance, the key (the sender's event or delivery id),
	// raises an inherited ttl to the sender's retry window, and, where
	// the key is outside what the sender signs (github, shopify, twilio),
	// holds the same payload under a new key for the ttl
	// (same_payload_window and on_same_payload: hold). The route gives
	// signature.secrets; whatever it sets itself wins, and a ttl it sets
	// shorter than the window is a warning. Default: none; the sender
	// that signature.scheme implies then gives the window's warning only.
	Sender string `json:"sender,omitempty"`
	// Policy holds the route's own policy fields, inline beside the above.
	Policy
}

// Rules are the route rules: the schema of the YAML rules file and of the
// handler's inline JSON config.
type Rules struct {
	// Defaults is the policy every route inherits.
	Defaults Policy `json:"defaults,omitzero"`
	// Routes are the route rules, matched in order. At least one.
	Routes []Route `json:"routes,omitempty"`

	warnings ErrorList // from Parse, located
	parsed   bool      // read by Parse: warnings are its
}

// Warnings returns what the rules allow but is probably wrong, such as a
// ttl shorter than the route's sender's retry window: nil when none.
// For rules from Load or Parse each names file, line and field, like
// their errors; for other rules (Caddy's JSON) the field. A handler logs
// them when it provisions.
func (r *Rules) Warnings() ErrorList {
	if r.parsed {
		return r.warnings
	}
	c := &errorList{}
	r.check(Limits{}, c)
	return c.warns
}

// Resolved is a route with every policy field filled in and its templates
// compiled. Its slices are its own; empty lists are nil.
type Resolved struct {
	Name      string
	Operation string   // the route's operation, or its name
	Methods   []string // upper case
	Path      string

	Key         []keying.Template
	Scope       []keying.Template // nil when the scope is an explicit [] or ScopeSender
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
	OnUnknownOutcome OnUnknown
	OnRedirect       OnRedirect
	OnStoreError     OnStoreError
	Confirm          bool // the console asks twice before an action
	// RedactFields are the route's and the defaults' redact_fields, lower
	// case, each once; nil when none.
	RedactFields []string
	// ShowUnparsedBodies: operator views show bodies they cannot redact
	// field by field as they are, not as size and digest.
	ShowUnparsedBodies bool
	Mode               Mode
	OnInFlight         OnInFlight
	// InFlightWait is how long a duplicate waits for the first request
	// to finish; 0 unless OnInFlight is wait.
	InFlightWait time.Duration

	Verify *VerifyRule // nil when the route has no verify rule

	// Protocol is the endpoint's protocol; Tools the guarded MCP tools
	// (nil unless Protocol is mcp) and OnToolError what a tool's
	// isError result means (store unless Protocol is mcp).
	Protocol    Protocol
	Tools       []string
	OnToolError OnToolError

	// Signature is the route's signature check; nil when none.
	Signature *SignatureRule
	// ScopeSender: the route's scope is the verified sender's identity
	// (Signature.Identity), as it has a signature and sets no scope
	// itself; Scope is then nil.
	ScopeSender bool
	// Sender is the webhook sender the route follows ("" none: see
	// Route.Sender) and SenderWindow its retry window (0 when none).
	Sender       string
	SenderWindow time.Duration

	// Retention: how long a tombstone outlives an expired record (0:
	// none), what a retry that finds one gets, and the same-payload
	// detector's window (0: off) and action.
	TombstoneTTL      time.Duration
	AfterExpiry       AfterExpiry
	SamePayloadWindow time.Duration
	OnSamePayload     OnSamePayload

	// The recovery path (see Retry): the budget of "not done"
	// executions, the breaker (nil: none), the owner ("" none), whether
	// requests are kept for a re-drive, and the headers a re-drive adds
	// (nil: none), sorted by name; and the headers a kept request
	// carries beyond the built-in ones.
	MaxExecutions  int
	Breaker        *BreakerRule
	Owner          string
	KeepRequest    bool
	RedriveHeaders []Header
	// KeepHeaders are the defaults' and the route's keep_headers,
	// canonical, each once; nil when none.
	KeepHeaders []string
}

// Resolve validates the rules against l (see Validate) and returns the
// routes, in order, with every policy field filled in.
func (r *Rules) Resolve(l Limits) ([]Resolved, error) {
	if err := r.Validate(l); err != nil {
		return nil, err
	}
	out := make([]Resolved, len(r.Routes))
	for i := range r.Routes {
		out[i] = resolveRoute(&r.Routes[i], &r.Defaults)
	}
	return out, nil
}

func resolveRoute(rt *Route, def *Policy) Resolved {
	res := Resolved{
		Name:       rt.Name,
		Operation:  cmp.Or(rt.Operation, rt.Name),
		Path:       rt.Match.Path,
		ExternalID: rt.ExternalID,
		Key:        compile(routeKey(rt)),
		Scope:      compile(firstSlice(rt.Scope, def.Scope, []string{defaultScope})),
		Fingerprint: keying.FingerprintRule{
			Body:   cloneOrNil(rt.Fingerprint.Body),
			Ignore: cloneOrNil(rt.Fingerprint.Ignore),
			// The path's wildcards always count; the query unless switched off.
			IgnoreQuery: rt.Fingerprint.Query != nil && !*rt.Fingerprint.Query,
		},

		TTL:                time.Duration(cmp.Or(rt.TTL, def.TTL, Duration(defaultTTL))),
		LockLease:          time.Duration(cmp.Or(rt.LockLease, def.LockLease, Duration(defaultLockLease))),
		HoldTTL:            time.Duration(cmp.Or(rt.HoldTTL, def.HoldTTL, Duration(defaultHoldTTL))),
		RequireKey:         *cmp.Or(rt.RequireKey, def.RequireKey, &defaultRequireKey),
		MaxBody:            int64(cmp.Or(rt.MaxBody, def.MaxBody, defaultMaxBody)),
		MaxResponse:        int64(cmp.Or(rt.MaxResponse, def.MaxResponse, defaultMaxResponse)),
		ForwardKeyHeader:   *cmp.Or(rt.ForwardKeyHeader, def.ForwardKeyHeader, &defaultForwardKeyHeader),
		RetryStatuses:      retryStatuses(&rt.Policy, def),
		OnUnknownOutcome:   cmp.Or(rt.OnUnknownOutcome, def.OnUnknownOutcome, OnUnknownHold),
		OnRedirect:         cmp.Or(rt.OnRedirect, def.OnRedirect, OnRedirectRelease),
		OnStoreError:       cmp.Or(rt.OnStoreError, def.OnStoreError, OnStoreErrorFailClosed),
		Confirm:            *cmp.Or(rt.Confirm, def.Confirm, &defaultConfirm),
		Verify:             resolveVerify(rt.Verify),
		RedactFields:       redactFields(def.RedactFields, rt.RedactFields),
		ShowUnparsedBodies: *cmp.Or(rt.ShowUnparsedBodies, def.ShowUnparsedBodies, &defaultShowUnparsed),
		Mode:               cmp.Or(rt.Mode, def.Mode, ModeEnforce),
		OnInFlight:         cmp.Or(rt.OnInFlight, def.OnInFlight, OnInFlightReject),
	}
	if res.OnInFlight == OnInFlightWait {
		res.InFlightWait = time.Duration(cmp.Or(rt.InFlightWait, def.InFlightWait, Duration(defaultInFlightWait)))
	}
	resolveProtocol(&res, rt)
	resolveRecovery(&res, &rt.Policy, def)
	resolveWebhook(&res, rt, def)
	for _, m := range firstSlice(rt.Match.Methods, methodsOf(rt.Protocol)) {
		res.Methods = append(res.Methods, strings.ToUpper(m))
	}
	return res
}

// compile compiles templates that Validate has checked.
func compile(src []string) []keying.Template {
	var out []keying.Template
	for _, s := range src {
		out = append(out, keying.MustParseTemplate(s))
	}
	return out
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

// redactFields joins the defaults' and a route's redact_fields: lower
// case, each once, in order; nil when none.
func redactFields(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, name := range l {
			if n := strings.ToLower(strings.TrimSpace(name)); !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}
