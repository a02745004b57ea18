package config

import "fmt"

// A routes.yaml with every field, the built-in defaults written out under
// defaults: (TestDocExample keeps it so). Load reads such a file; Parse
// reads bytes. A problem names the file, line and field.
func Example() {
	const rules = `defaults:
  ttl: 24h                 # how long a completed result is replayed (>= 1s)
  lock_lease: 30s          # how long an in-flight claim lives without renewal (>= 1s, > op_timeout)
  hold_ttl: 720h           # how long an "outcome unknown" record waits (>= lock_lease)
  require_key: true        # 400 when no key can be derived; false: pass through unguarded
  max_body: 1MiB           # larger request bodies get 413 (<= 64MiB)
  max_response: 1MiB       # larger responses are streamed and stored as status+headers+digest
  scope: ["{header.Authorization}"]   # hashed into every key: clients never share keys
  forward_key_header: Idempotency-Key # send the derived key upstream ("" = don't)
  retry_statuses: [401, 403, 404, 405, 408, 413, 415, 425, 429, 431, 503]  # "not done": release, let retries execute
  store_statuses: []                  # of those, stored and replayed all the same (e.g. [404])
  tombstone_ttl: 720h                 # an expired record's tombstone: a late retry is counted (0s: none)
  after_expiry: execute               # a late retry: execute | reject (409 expired)
  same_payload_window: 0s             # off; e.g. 24h: flag a new key with a payload already done
  on_redirect: release                # 307/308: release (the redirected request executes) | store
  on_unknown_outcome: hold            # hold | release | store
  on_store_error: fail_closed         # fail_closed (503) | fail_open (forward unguarded)
  mode: enforce                       # enforce | observe (forward everything, count what enforce would do)
  on_in_flight: reject                # reject (409) | wait (up to in_flight_wait for the first request)
routes:
  # A CRM webhook: the provider sends an event id; a client's Idempotency-Key wins.
  - name: create_crm_deal             # required, unique; also the operation
    match:
      methods: [POST]                 # default: POST, PUT, PATCH, DELETE
      path: /crm/deals                # required; Caddy path matcher syntax
    key:                              # first template that fully resolves wins
      - "{header.Idempotency-Key}"
      - "{body.event.id}:{body.event.type}"
    fingerprint:
      body: [amount, currency, customer_id]  # only these fields must match on a retry
      ignore: [meta.delivery_attempt]        # volatile fields left out
    external_id: id                   # JSON path in the upstream response, recorded
    ttl: 72h                          # overrides defaults.ttl for this route
    scope: []                         # no scope: keys are per operation only
  # The same command re-sent internally: same operation and scope, so shared keys.
  - name: retry_crm_deal
    operation: create_crm_deal
    match: { path: "/internal/crm/deals/*/retry" }
    key: ["{header.Idempotency-Key}", "{body.event.id}:{body.event.type}"]
    fingerprint: { body: [amount, currency, customer_id] }
    scope: []
  # Payments: the upstream honours the forwarded key, so unknown outcomes retry.
  - name: capture_payment
    match: { methods: [POST], path: "/payments/*/capture" }
    key: ["{header.Idempotency-Key}", "{form.capture_id}"]
    forward_key_header: X-Request-Key
    on_unknown_outcome: release
    retry_statuses: [409, 429, 503]
    max_body: 64KiB
    lock_lease: 2m
  # Webhooks keyed by a query parameter; requests without one pass.
  - name: ingest_event
    match: { methods: [POST, PUT], path: /events }
    key: ["{query.event_id}"]
    fingerprint: { query: false }     # the query string does not count
    require_key: false
    on_store_error: fail_open
    on_in_flight: wait                # a provider's retry waits for the first delivery
    in_flight_wait: 3s
`
	r, err := Parse("routes.yaml", []byte(rules), Limits{})
	if err != nil {
		panic(err)
	}
	routes, err := r.Resolve(Limits{})
	if err != nil {
		panic(err)
	}
	for _, rt := range routes {
		fmt.Println(rt.Name, rt.Operation, rt.Methods, rt.Path, rt.TTL, rt.OnUnknownOutcome)
	}
	_, err = Parse("routes.yaml", []byte(rules+"    on_store_error: fail_softly\n"), Limits{})
	fmt.Println(err)
	// Output:
	// create_crm_deal create_crm_deal [POST] /crm/deals 72h0m0s hold
	// retry_crm_deal create_crm_deal [POST PUT PATCH DELETE] /internal/crm/deals/*/retry 24h0m0s hold
	// capture_payment capture_payment [POST] /payments/*/capture 24h0m0s release
	// ingest_event ingest_event [POST PUT] /events 24h0m0s hold
	// routes.yaml:60: routes[3].on_store_error: is set twice (first on line 57)
}
