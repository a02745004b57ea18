// Package operator is the one operator service behind the admin API
// (package adminapi) and the operator console (package console): it finds
// records in the live stores, checks an operator's completion, takes the
// actions (release, complete, verify, run) through the stores' fenced
// operator calls and the live handlers, redacts stored bodies, and maps
// what went wrong to one HTTP status. Both front ends add only their own
// transport: JSON for the admin API, forms and pages for the console.
//
// The package sits below the idempotency handler (package caddymodule):
// the process's store pool lists the handlers' stores
// (storepool.LiveStores), and the handler runs checks and re-drives for
// the service through the small Actions interface, so nothing here
// imports the handler.
package operator
