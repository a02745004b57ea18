package store

import (
	"fmt"
	"net/http"
	"testing"
)

func TestStorableHeader(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"Content-Type":      {"application/json"},
		"Set-Cookie":        {"a=1", "b=2"},
		"Location":          {"/x"},
		"Connection":        {"keep-alive, X-Hop"},
		"X-Hop":             {"1"},
		"Keep-Alive":        {"timeout=5"},
		"Transfer-Encoding": {"chunked"},
		"Server":            {"Caddy"},
		"Alt-Svc":           {"h3"},
		"Via":               {"1.1 Caddy"},
		"Date":              {"now"},
		"Content-Length":    {"12"},
	}
	got := StorableHeader(h)
	want := http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}, "Location": {"/x"},
		"Server": {"Caddy"}, "Via": {"1.1 Caddy"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("StorableHeader = %v, want %v", got, want)
	}
	if h.Get("Server") == "" {
		t.Error("StorableHeader changed its argument")
	}
}
