package main

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
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
	u := &upstream{addr: ln.Addr().String()}
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
