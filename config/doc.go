// Package config loads, checks and resolves Idemgate's route rules.
//
// Route rules say which requests the gateway guards, how it derives their
// idempotency key, scope and payload fingerprint, and what it does with the
// upstream's outcome. They come either from a YAML file (Load, Parse),
// decoded through github.com/spf13/viper, or inline from Caddy's JSON,
// which uses the same types and field names (Rules, Validate, Resolve).
//
// # Files, lines and fields
//
// Every problem is an *Error naming the file, line and field, collected in
// an ErrorList:
//
//	routes.yaml:9: routes[1].on_unknown_outcome: "maybe" is not one of hold, release, store
//	routes.yaml:4: routes[0].nmae: unknown field; did you mean name?
//
// Viper keeps no positions, so Parse parses the same bytes with
// go.yaml.in/yaml/v3 into a node tree and maps each field path to its line
// (or to the line of its closest existing parent). Rules from JSON are
// checked by Validate, whose errors have the field but no file or line.
//
// Field names are lower-case snake_case and unknown fields are errors.
// Values keep their case: viper lowercases keys, never values, so
// "{header.Idempotency-Key}" stays as written. Durations are Go durations
// ("30s", "24h", "720h"; a bare number is rejected in YAML, since it would
// mean nanoseconds); sizes are numbers of bytes or text such as "1MiB"
// (1048576) or "512KB" (512000). YAML anchors and merge keys may be used to
// share settings between routes.
//
// # Defaults
//
// Every policy field of a route (the fields of Policy) falls back to the
// same field under "defaults:", then to a built-in default. A field that
// is absent (or null) inherits; in YAML, an explicit zero value (ttl: 0s,
// max_body: 0, an empty on_store_error) is an error rather than a silent
// "inherit". Two lists distinguish absent from empty: "scope: []" means
// keys have no scope, and "retry_statuses: []" means no upstream status
// releases a claim. An empty forward_key_header means the key is not sent
// upstream.
//
// # Example routes.yaml
//
// Every field, with the built-in defaults written out under defaults:
//
//	# Idemgate route rules.
//	defaults:
//	  ttl: 24h                 # how long a completed result is replayed
//	  lock_lease: 30s          # how long an in-flight claim lives without renewal (>= 1s)
//	  hold_ttl: 720h           # how long an "outcome unknown" record waits for an operator
//	  require_key: true        # 400 when no key can be derived; false: pass through unguarded
//	  max_body: 1MiB           # larger request bodies get 413
//	  max_response: 1MiB       # larger responses are streamed and stored as status+headers+digest
//	  scope: ["{header.Authorization}"]   # hashed into every key: clients never share keys
//	  forward_key_header: Idempotency-Key # send the derived key upstream ("" = don't)
//	  retry_statuses: [429, 503]          # upstream said "not done": release, let retries execute
//	  on_unknown_outcome: hold            # hold | release | store
//	  on_store_error: fail_closed         # fail_closed (503) | fail_open (forward unguarded)
//	  confirm: false                      # true: the operator console asks twice before an action
//
//	routes:
//	  # A CRM webhook: the provider sends an event id; the client may also
//	  # send an Idempotency-Key header, which wins when present.
//	  - name: create_crm_deal             # required, unique; also the operation
//	    match:
//	      methods: [POST]                 # default: POST, PUT, PATCH, DELETE
//	      path: /crm/deals                # required; Caddy path matcher syntax
//	    key:                              # first template that fully resolves wins
//	      - "{header.Idempotency-Key}"
//	      - "{body.event.id}:{body.event.type}"
//	    fingerprint:
//	      body: [amount, currency, customer_id]  # only these fields must match on a retry
//	      ignore: [meta.delivery_attempt]        # volatile fields left out
//	    external_id: id                   # JSON path in the upstream response, recorded
//	    ttl: 72h                          # overrides defaults.ttl for this route
//	    scope: []                         # the provider signs each delivery differently:
//	                                      # no scope, keys are per operation only
//
//	  # An internal endpoint that re-sends the same command: same operation
//	  # and same (empty) scope, so both routes share keys and a deal is
//	  # created once whichever way it arrives.
//	  - name: retry_crm_deal
//	    operation: create_crm_deal
//	    match: { path: "/internal/crm/deals/*/retry" }
//	    key: ["{header.Idempotency-Key}", "{body.event.id}:{body.event.type}"]
//	    fingerprint: { body: [amount, currency, customer_id] }
//	    scope: []
//
//	  # Payments: the upstream honours the forwarded key itself, so an
//	  # unknown outcome may simply be retried.
//	  - name: capture_payment
//	    match: { methods: [POST], path: "/payments/*/capture" }
//	    key: ["{header.Idempotency-Key}", "{form.capture_id}"]
//	    forward_key_header: X-Request-Key
//	    on_unknown_outcome: release
//	    retry_statuses: [409, 429, 503]
//	    max_body: 64KiB
//	    lock_lease: 2m
//
//	  # Webhooks keyed by a query parameter; requests without one pass.
//	  - name: ingest_event
//	    match: { methods: [POST, PUT], path: /events }
//	    key: ["{query.event_id}"]
//	    require_key: false
//	    on_store_error: fail_open
package config
