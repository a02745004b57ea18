// Command crm is a small CRM-like upstream for trying Idemgate: every
// POST /crm/deals creates a deal D-<n> (and counts it), whether or not it is
// a duplicate. It knows nothing about idempotency; that is the point.
//
//	GET  /stats       {"deals_created": n, "requests": m}
//	POST /crm/deals   201 {"id": "D-9021", ...}, Location: /crm/deals/D-9021
//
// A request header X-Demo-Delay (a Go duration, at most 10s) makes the
// creation take that long, to show what a concurrent duplicate sees.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"sync"
	"time"
)

type crm struct {
	mu       sync.Mutex
	next     int
	created  int
	requests int
}

func (c *crm) createDeal(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	var payload map[string]any
	if len(body) > 0 && json.Unmarshal(body, &payload) != nil {
		http.Error(w, "body is not JSON", http.StatusBadRequest)
		return
	}
	if d, err := time.ParseDuration(r.Header.Get("X-Demo-Delay")); err == nil && d > 0 && d <= 10*time.Second {
		time.Sleep(d)
	}

	c.mu.Lock()
	c.requests++
	c.created++
	c.next++
	id := fmt.Sprintf("D-%d", 9020+c.next)
	c.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/crm/deals/"+id)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id":         id,
		"status":     "created",
		"source_key": r.Header.Get("Idempotency-Key"),
		"request":    payload,
	})
}

func (c *crm) stats(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	out := map[string]int{"deals_created": c.created, "requests": c.requests}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9001", "address to listen on")
	flag.Parse()

	c := new(crm)
	mux := http.NewServeMux()
	mux.HandleFunc("/crm/deals", c.createDeal)
	mux.HandleFunc("GET /stats", c.stats)

	log.Printf("crm upstream listening on http://%s (POST /crm/deals, GET /stats)", *listen)
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
