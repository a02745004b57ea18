// Package config loads, checks and resolves Idemgate's route rules: which
// requests the gateway guards, how it derives their idempotency key, scope
// and payload fingerprint, and what it does with the upstream's outcome.
// They come from a YAML file (Load, Parse) or inline from Caddy's JSON,
// with the same types and field names (Rules, Validate, Resolve).
//
// The YAML is decoded from go.yaml.in/yaml/v3 nodes, strictly: field names
// are lower-case snake_case, unknown or repeated fields and loosely typed
// values are errors, and every problem is an *Error naming the file, line
// and field, collected in an ErrorList:
//
//	routes.yaml:9: routes[1].on_unknown_outcome: "maybe" is not one of hold, release, store
//	routes.yaml:4: routes[0].nmae: unknown field; did you mean name?
//
// Rules from JSON are checked by Validate: the field, no file or line.
// Durations read as Caddy's do ("30s", "24h", "7d"; a bare number is an
// error in YAML and nanoseconds in JSON); sizes are numbers of bytes or
// text such as "1MiB" or "512KB". Anchors and merge keys may share settings.
//
// Every policy field of a route (Policy) falls back to the same field under
// "defaults:", then to a built-in default; absent or null inherits, an
// explicit zero is an error. "scope: []" means no scope, "retry_statuses:
// []" no releasing status, and forward_key_header: "" no forwarded key.
//
// See the package example for a routes.yaml with every field.
package config
