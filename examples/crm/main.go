// Command crm is a small CRM-like upstream for trying Idemgate: every
// POST /crm/deals creates a deal D-<n> (and counts it), whether or not it is
// a duplicate. It knows nothing about idempotency; that is the point.
//
//	GET  /stats                   {"deals_created": n, "requests": m}
//	POST /crm/deals               201 {"id": "D-9021", ...}, Location: /crm/deals/D-9021
//	GET  /crm/deals?source_key=K  200 [{"id": "D-9021", ...}]: the deals created
//	                              with Idempotency-Key K ([] when none)
//
// A deal whose "amount" is there but not a number is refused with 422
// {"error": "amount must be a number"}, and nothing is created.
//
// A request header X-Demo-Delay (a Go duration, at most 10s) makes the
// creation take that long, to show what a concurrent duplicate sees.
// X-Demo-Drop: 1 makes it create the deal and then drop the connection
// without an answer, as when a CRM's answer is lost on the way back.
// X-Demo-Status: 5xx makes it fail: it answers that status and creates
// nothing, and its lookups for that Idempotency-Key answer the same status
// until a creation with the key succeeds, so a lookup cannot tell whether
// the deal exists and the operation waits for an operator.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// deal is one created deal.
type deal struct {
	ID        string         `json:"id"`
	Status    string         `json:"status"`
	SourceKey string         `json:"source_key"`
	CreatedAt time.Time      `json:"created_at"`
	Request   map[string]any `json:"request"`
}

type crm struct {
	mu       sync.Mutex
	next     int
	created  int
	requests int
	bySource map[string][]deal
	failing  map[string]int // status the lookups of a key answer (X-Demo-Status)
}

func (c *crm) deals(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		c.createDeal(w, r)
	case http.MethodGet, http.MethodHead:
		c.findDeals(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (c *crm) createDeal(w http.ResponseWriter, r *http.Request) {
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
	if a, ok := payload["amount"]; ok {
		if _, isNum := a.(float64); !isNum {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "amount must be a number"})
			return
		}
	}
	if d, err := time.ParseDuration(r.Header.Get("X-Demo-Delay")); err == nil && d > 0 && d <= 10*time.Second {
		time.Sleep(d)
	}
	if code, err := strconv.Atoi(r.Header.Get("X-Demo-Status")); err == nil && code >= 500 && code <= 599 {
		c.mu.Lock()
		c.requests++
		if key := sourceKey(r); key != "" {
			c.failing[key] = code
		}
		c.mu.Unlock()
		http.Error(w, "the CRM failed (X-Demo-Status)", code)
		return
	}

	c.mu.Lock()
	c.requests++
	c.created++
	c.next++
	d := deal{
		ID:        fmt.Sprintf("D-%d", 9020+c.next),
		Status:    "created",
		SourceKey: sourceKey(r),
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
		Request:   payload,
	}
	if d.SourceKey != "" {
		c.bySource[d.SourceKey] = append(c.bySource[d.SourceKey], d)
		delete(c.failing, d.SourceKey)
	}
	c.mu.Unlock()

	if r.Header.Get("X-Demo-Drop") == "1" {
		// The deal exists; its answer never arrives.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/crm/deals/"+d.ID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(d)
}

// sourceKey is the request's Idempotency-Key: a Structured Field string
// ("order-1"), as the IETF Idempotency-Key draft has clients send it and
// the gateway forwards it, or a bare value from a client that calls the
// CRM directly.
func sourceKey(r *http.Request) string {
	return keying.ParseKeyHeader(r.Header.Get("Idempotency-Key"))
}

// findDeals answers GET /crm/deals?source_key=K with the deals that
// requests with Idempotency-Key K created.
func (c *crm) findDeals(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("source_key")
	if key == "" {
		http.Error(w, "source_key is required", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	found := append([]deal{}, c.bySource[key]...)
	failing := c.failing[key]
	c.mu.Unlock()
	if failing != 0 {
		http.Error(w, "the CRM failed (X-Demo-Status)", failing)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(found)
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

	c := &crm{bySource: map[string][]deal{}, failing: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/crm/deals", c.deals)
	mux.HandleFunc("GET /stats", c.stats)

	// Port 0 takes a free port; the line below names it.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("crm upstream listening on http://%s (POST /crm/deals, GET /crm/deals?source_key=K, GET /stats)", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
