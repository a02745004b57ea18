package adminapi

import (
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// jsonOnly is the RFC 9457 problem that answers a state-changing
// operator request whose body is not declared as JSON.
type jsonOnly struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

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
	body, err := json.Marshal(jsonOnly{
		Type:   "https://github.com/idemgate/idemgate/blob/main/docs/problems.md#admin-json-only",
		Title:  "The operator API accepts only application/json",
		Status: http.StatusUnsupportedMediaType,
		Detail: "POST requests to the operator API must have Content-Type: application/json (so that a page on another site cannot send them through an operator's browser)",
	})
	if err != nil {
		return false, err
	}
	hdr := w.Header()
	hdr.Set("Accept-Post", "application/json")
	hdr.Set("Content-Type", "application/problem+json")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnsupportedMediaType)
	_, err = w.Write(body)
	return false, err
}
