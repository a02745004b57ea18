package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// gatedUpstream answers once released: 201, or status when set.
type gatedUpstream struct {
	counting
	entered chan struct{}
	release chan int // the status to answer with
	once    sync.Once
}

func newGated() *gatedUpstream {
	return &gatedUpstream{entered: make(chan struct{}), release: make(chan int, 1)}
}

func (g *gatedUpstream) next(w http.ResponseWriter, r *http.Request) error {
	g.once.Do(func() { close(g.entered) })
	status := <-g.release
	n := g.calls.Add(1)
	w.WriteHeader(status)
	_, err := fmt.Fprintf(w, `{"id":"D-%d"}`, n)
	return err
}

const waitRules = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    on_in_flight: wait
    in_flight_wait: %s
`

// TestWaitForFirst: duplicates that find the first request in flight wait
// for it and get what it ended with: its replay (one execution), the 409
// of an outcome held as unknown, or, when it was released, an execution
// of their own (once); past in_flight_wait, the 409 they would have had.
func TestWaitForFirst(t *testing.T) {
	for _, st := range testStores {
		for _, tc := range []struct {
			name       string
			wait       string
			status     int // the first's answer
			wantFirst  int
			want       string // the waiters' statuses, sorted, as "code×n"
			executions int64
		}{
			{"replay", "5s", http.StatusCreated, http.StatusCreated, "201×5", 1},
			{"unknown", "5s", http.StatusBadGateway, http.StatusBadGateway, "409×5", 1},
			{"released", "5s", http.StatusServiceUnavailable, http.StatusServiceUnavailable, "201×5", 2},
			{"timeout", "100ms", http.StatusCreated, http.StatusCreated, "409×5", 1},
		} {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				h, _ := newHandler(t, fmt.Sprintf(waitRules, tc.wait), st.cfg(t))
				up := newGated()
				first := make(chan int)
				go func() { first <- serve(h, up.next, "POST", "/deals", `{"a":1}`, "Idempotency-Key", "k").Code }()
				<-up.entered
				var wg sync.WaitGroup
				codes := make(chan int, 5)
				var bodies sync.Map
				for i := range 5 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						w := serve(h, up.next, "POST", "/deals", `{"a":1}`, "Idempotency-Key", "k")
						codes <- w.Code
						bodies.Store(i, w.Body.String())
					}()
				}
				// The duplicates are waiting (or, past a short wait, done).
				time.Sleep(300 * time.Millisecond)
				up.release <- tc.status
				if tc.status == http.StatusServiceUnavailable {
					up.release <- http.StatusCreated // the one waiter that executes
				}
				if c := <-first; c != tc.wantFirst {
					t.Errorf("first: %d, want %d", c, tc.wantFirst)
				}
				wg.Wait()
				close(codes)
				count := map[int]int{}
				for c := range codes {
					count[c]++
				}
				var got []string
				for c, n := range count {
					got = append(got, fmt.Sprintf("%d×%d", c, n))
				}
				slices.Sort(got)
				if strings.Join(got, ",") != tc.want {
					t.Errorf("waiters: %v, want %s", got, tc.want)
				}
				if n := up.calls.Load(); n != tc.executions {
					t.Errorf("executions %d, want %d", n, tc.executions)
				}
				if tc.name == "unknown" {
					bodies.Range(func(_, v any) bool {
						if !strings.Contains(v.(string), "outcome-unknown") {
							t.Errorf("waiter body %s, want the outcome-unknown problem", v)
						}
						return false
					})
				}
			})
		}
	}
}

// TestWaiterHangsUp: a client that goes away while waiting leaves no watch
// behind and costs no store call after it left.
func TestWaiterHangsUp(t *testing.T) {
	h, _ := newHandler(t, fmt.Sprintf(waitRules, "5s"), testStores[0].cfg(t))
	up := newGated()
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		serve(h, up.next, "POST", "/deals", `{"a":1}`, "Idempotency-Key", "k")
	}()
	<-up.entered
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := newRequestCtx(ctx, "POST", "/deals", `{"a":1}`, "Idempotency-Key", "k")
		_ = h.ServeHTTP(newDiscard(), req, caddyhttp.HandlerFunc(up.next))
	}()
	hub := h.gate.Notices.(interface{ Watching() int })
	for range 200 {
		if hub.Watching() == 1 { // the waiter's; the first holds none while it runs
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := hub.Watching(); n != 1 {
		t.Fatalf("watching %d, want 1", n)
	}
	began := time.Now()
	cancel()
	<-done
	if d := time.Since(began); d > time.Second {
		t.Errorf("the waiter left %s after its client, want at once", d)
	}
	if n := hub.Watching(); n != 0 {
		t.Errorf("watching %d after the client left, want 0", n)
	}
	up.release <- http.StatusCreated
	<-firstDone // the store is closed when the test ends
}

// newRequestCtx is a request as Caddy hands it to the handler, under ctx.
func newRequestCtx(ctx context.Context, method, path, body string, headers ...string) *http.Request {
	req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return caddyhttp.PrepareRequest(req, caddy.NewReplacer(), httptest.NewRecorder(), &caddyhttp.Server{})
}

func newDiscard() *discardWriter { return &discardWriter{header: http.Header{}} }

// TestWaitWithoutNotices: on an engine without notices a waiter polls the
// store (a tenth of in_flight_wait, at least 50ms) and still gets the
// replay, once the first completes.
func TestWaitWithoutNotices(t *testing.T) {
	h, _ := newHandler(t, fmt.Sprintf(waitRules, "1s"), testStores[0].cfg(t))
	h.gate.Notices = nil // as an engine that cannot notify
	up := newGated()
	first := make(chan int, 1)
	go func() { first <- serve(h, up.next, "POST", "/deals", `{"a":1}`, "Idempotency-Key", "k").Code }()
	<-up.entered
	time.AfterFunc(250*time.Millisecond, func() { up.release <- http.StatusCreated })
	w := serve(h, up.next, "POST", "/deals", `{"a":1}`, "Idempotency-Key", "k")
	if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("waiter without notices: %d replayed=%q %s, want the replay", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	if c := <-first; c != http.StatusCreated {
		t.Errorf("first: %d", c)
	}
	if n := up.calls.Load(); n != 1 {
		t.Errorf("executions %d, want 1", n)
	}
}
