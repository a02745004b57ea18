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
// Each policy field of a route falls back to the same field under
// "defaults:", then to a built-in default. See the package example for a
// routes.yaml with every field.
package config
