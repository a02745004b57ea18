// Package config loads, checks and resolves Idemgate's route rules: which
// requests the gateway guards, how it derives their key, scope and payload
// fingerprint, and what it does with the upstream's outcome. They come from
// a YAML file (Load, Parse) or inline from Caddy's JSON, with the same types
// and field names (Rules, Validate, Resolve).
//
// The YAML is read strictly from yaml.v3 nodes: unknown, repeated or
// upper-case fields, loosely typed values and explicit zeros are errors.
// Every problem is an *Error naming the file, line and field:
//
//	routes.yaml:4: routes[0].nmae: unknown field; did you mean name?
//
// What is allowed but probably wrong, such as a ttl shorter than the
// route's webhook sender's retry window, is a warning in the same form
// (Rules.Warnings), for the handler to log:
//
//	routes.yaml:9: routes[1].ttl: routes[1]'s ttl 24h0m0s is shorter than stripe's retry window, 72h0m0s (...)
//
// Each policy field of a route falls back to the same field under
// "defaults:", then to a built-in default. See the package example for a
// routes.yaml with every field.
package config
