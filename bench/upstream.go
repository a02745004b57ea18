package main

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// upstream is the API behind the gateway: every POST creates a "deal" and
// answers 201 with a JSON body of about 300 bytes. A request with the
// header X-Bench-Fail answers 500 instead, which the gateway holds as
// outcome unknown: that is how the conflict variant's records are made.
type upstream struct {
	srv   *http.Server
	addr  string
	calls atomic.Int64
	conns atomic.Int64 // connections accepted
	// slowAnswered is when the last call of /v1/slow answered (Unix ns).
	slowAnswered atomic.Int64

	mu    sync.Mutex
	byKey map[string]int64 // calls by key set (keySet)
}

// keySet returns the part of an Idempotency-Key that names where it came
// from: the fixed set of replay or conflict keys ("r-RUNID" of
// "r-RUNID-12"), or the load run that made it up ("RUNID-executer0" of
// "RUNID-executer0-3-17": thread or connection, then counter). Counting
// calls by key set tells which run made a call, however late it reaches
// the upstream.
func keySet(key string) string {
	strip := 2
	if strings.HasPrefix(key, "r-") || strings.HasPrefix(key, "h-") {
		strip = 1
	}
	for range strip {
		i := strings.LastIndexByte(key, '-')
		if i < 0 {
			return ""
		}
		key = key[:i]
	}
	return key
}

// callsOf returns the calls made so far with keys of the given set.
func (u *upstream) callsOf(set string) int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byKey[set]
}

// dealPad makes the created deal's JSON about 300 bytes long.
const dealPad = `"title":"Acme Corp annual renewal","amount":4200,"currency":"EUR",` +
	`"customer_id":"cus_9s6XKzkNRiz8i3","owner":"sales-emea-7","stage":"closed_won",` +
	`"created_at":"2026-12-01T04:41:05Z","links":{"self":"/v1/deals/`

func startUpstream() (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{addr: ln.Addr().String(), byKey: map[string]int64{}}
	u.srv = &http.Server{
		Handler:           http.HandlerFunc(u.serve),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				u.conns.Add(1)
			}
		},
	}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := u.calls.Add(1)
	set := keySet(forwardedKey(r))
	u.mu.Lock()
	u.byKey[set]++
	u.mu.Unlock()
	if r.URL.Path == "/v1/slow" {
		time.Sleep(slowCall)
		u.slowAnswered.Store(time.Now().UnixNano())
	}
	if r.Header.Get("X-Bench-Fail") != "" {
		http.Error(w, "upstream failed", http.StatusInternalServerError)
		return
	}
	id := strconv.AppendInt([]byte("D-"), n, 10)
	body := make([]byte, 0, 320)
	body = append(body, `{"id":"`...)
	body = append(body, id...)
	body = append(body, `",`...)
	body = append(body, dealPad...)
	body = append(body, id...)
	body = append(body, `"},"status":"created"}`...)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Location"] = []string{"/v1/deals/" + string(id)}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

func (u *upstream) close() { _ = u.srv.Close() }

// forwardedKey is the key the gateway forwards: a Structured Field string
// ("k-1-2"), as the IETF Idempotency-Key draft has clients send it.
func forwardedKey(r *http.Request) string {
	return keying.ParseKeyHeader(r.Header.Get("Idempotency-Key"))
}
