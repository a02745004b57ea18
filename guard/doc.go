// Package guard holds the steps of a guarded request that do not need
// Caddy: the claim (claim.go, with the wait for the first request in
// wait.go and the retention a claim finds in retention.go), the one
// execution of an operation (forward.go), the recording of its outcome
// (record.go) and the answers from a record (answer.go), with the MCP
// hooks of each (mcp.go).
//
// A request reaches them as an Operation (operation.go): one immutable
// value the adapter (package caddymodule) builds from Caddy's request
// (its route, key, fingerprint, id, check and sealed request). A Gate
// (gate.go) holds what the steps use: the store and the bookkeeping
// around it. Each step returns what it found (Found) or what became of
// the request (Outcome); the adapter sets the outcome in one place and
// writes the decision's log line from it. docs/request-path.md lists one
// execute's way, function by function.
package guard
