package drill

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestProxyDropAfterAnswer: the proxy lets the request reach the upstream,
// which acts and answers; the gateway's side gets no answer. And the
// other faults: 503 with Retry-After without reaching the upstream, and
// refused connections until it listens again.
func TestProxyDropAfterAnswer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	created := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(opHeader) != "" {
			t.Errorf("the upstream got the drill's %s header", opHeader)
		}
		mu.Lock()
		created++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"D-1"}`)
	}))
	defer up.Close()
	var notes []string
	p, err := startProxy(up.URL, func(op, msg string) { mu.Lock(); notes = append(notes, op+" "+msg); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	post := func(op string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/crm/deals", strings.NewReader(`{}`))
		req.Header.Set(opHeader, op)
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	p.plan("a", step{fault: dropAnswer})
	if resp, err := post("a"); err == nil {
		t.Fatalf("the dropped answer arrived: %s", resp.Status)
	}
	mu.Lock()
	if created != 1 {
		t.Errorf("the upstream acted %d times, want once", created)
	}
	mu.Unlock()
	if c := p.countsOf("a"); c != (opCounts{Arrived: 1, Reached: 1, Answered: 1, OK: 1, Dropped: 1}) {
		t.Errorf("counts %+v", c)
	}
	// The next arrival of the operation passes.
	if resp, err := post("a"); err != nil || resp.StatusCode != http.StatusCreated {
		t.Errorf("the second request: %v %v", resp, err)
	}

	p.plan("b", step{fault: unavailable})
	resp, err := post("b")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("unavailable: %v %v", resp, err)
	}
	if c := p.countsOf("b"); c.Reached != 0 || c.Arrived != 1 {
		t.Errorf("unavailable reached the upstream: %+v", c)
	}

	p.refuse()
	if _, err := post("c"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("while refusing: %v", err)
	}
	if err := p.resume(); err != nil {
		t.Fatal(err)
	}
	if resp, err := post("c"); err != nil || resp.StatusCode != http.StatusCreated {
		t.Errorf("after resuming: %v %v", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if created != 3 || len(notes) == 0 || !strings.Contains(notes[0], "answered 201; the connection to the gateway is dropped") {
		t.Errorf("created %d, notes %q", created, notes)
	}
}
