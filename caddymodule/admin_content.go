package caddymodule

import (
	"mime"
	"net/http"
	"strings"
)

// probAdminJSONOnly answers a state-changing operator request whose body
// is not declared as JSON.
var probAdminJSONOnly = problem{Type: problemBase + "admin-json-only", Title: "The operator API accepts only application/json", Status: http.StatusUnsupportedMediaType}

// jsonRequest reports whether r declares exactly one Content-Type,
// application/json (any case, parameters such as charset allowed).
//
// Caddy's admin endpoint checks Host but not Origin (unless
// enforce_origin is on), so a page on another site could otherwise make
// an operator's browser POST to it: a form sends text/plain, urlencoded
// or multipart bodies, and a no-cors fetch may send no Content-Type at
// all; application/json needs a CORS preflight, which the admin endpoint
// does not grant to other origins.
func jsonRequest(r *http.Request) bool {
	values := r.Header.Values("Content-Type")
	if len(values) != 1 {
		return false
	}
	mt, _, err := mime.ParseMediaType(values[0])
	return err == nil && strings.EqualFold(mt, "application/json")
}

// requireJSON answers 415 problem+json unless r is declared as JSON; it
// reports whether the request may go on.
func requireJSON(w http.ResponseWriter, r *http.Request) (bool, error) {
	if jsonRequest(r) {
		return true, nil
	}
	w.Header().Set("Accept-Post", "application/json")
	p := probAdminJSONOnly
	p.Detail = "POST requests to the operator API must have Content-Type: application/json (so that a page on another site cannot send them through an operator's browser)"
	return false, p.write(w)
}
