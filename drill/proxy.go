package drill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/proc"
)

// opHeader carries an operation's id from the drill, through its gateway,
// to its fault proxy, which takes it off before the upstream sees the
// request: the proxy's counts and faults are per operation.
const opHeader = "X-Idemgate-Drill-Op"

// fault is what the proxy does to one request of an operation.
type fault int

const (
	pass        fault = iota // forward, answer
	unavailable              // answer 503 with Retry-After itself; the upstream is not reached
	dropAnswer               // forward, let the upstream answer, then drop the connection to the gateway
	delayAnswer              // forward, let the upstream answer, give the answer to the gateway after a delay
)

// step is the fault for one arrival of an operation at the proxy.
type step struct {
	fault fault
	delay time.Duration // delayAnswer
}

// opCounts is what the proxy saw of one operation.
type opCounts struct {
	Arrived  int // requests the gateway sent to the proxy
	Reached  int // requests the proxy forwarded to the upstream
	Answered int // of these, answers the upstream gave (any status)
	OK       int // of these, 2xx answers
	Dropped  int // answers the upstream gave that the gateway never got
}

// proxy is the drill's fault proxy between its gateway and the upstream.
// Besides per-operation faults it can refuse connections altogether (it
// stops listening) and take them again on the same address.
type proxy struct {
	upstream *url.URL
	client   *http.Client
	addr     string // 127.0.0.1:port, fixed for the proxy's life
	note     func(op, msg string)

	mu       sync.Mutex
	srv      *http.Server // nil while refusing
	closed   bool         // close was called: it never listens again
	steps    map[string][]step
	counts   map[string]*opCounts
	answered *sync.Cond // broadcast when an upstream answer arrives
}

// maxAnswer bounds the upstream answer the proxy holds in memory.
const maxAnswer = 16 << 20

// startProxy listens on a free loopback port and forwards to upstream.
// note receives the events of each operation, for its timeline.
func startProxy(upstream string, note func(op, msg string)) (*proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	p := &proxy{
		upstream: u,
		client: &http.Client{
			Timeout:       2 * time.Minute,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		note:   note,
		steps:  map[string][]step{},
		counts: map[string]*opCounts{},
	}
	p.answered = sync.NewCond(&p.mu)
	ln, err := listenBelowEphemeral()
	if err != nil {
		return nil, err
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	return p, nil
}

// listenBelowEphemeral listens on a loopback port from below the range the
// kernel takes source ports from (proc.FreePort). The proxy closes its
// listener to refuse connections and listens on the same port again to
// resume: a port from that range could meanwhile become the source port
// of any outgoing connection, or a port 0 listener's, so that resuming
// fails and "refused" is not what the gateway meets.
func listenBelowEphemeral() (net.Listener, error) {
	var err error
	for range 5 {
		var port int
		if port, err = proc.FreePort(); err != nil {
			return nil, err
		}
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return ln, nil
		}
	}
	return nil, fmt.Errorf("the fault proxy cannot listen: %w", err)
}

// serve serves ln. Every exchange has a connection of its own (no
// keep-alive), so that once the proxy refuses, the gateway's next call is
// a refused dial, never a request written into a pooled connection the
// proxy had just closed: that fails after sending, an outcome nobody
// knows, which is another scenario.
func (p *proxy) serve(ln net.Listener) {
	p.srv = &http.Server{Handler: http.HandlerFunc(p.handle), ReadHeaderTimeout: 10 * time.Second}
	p.srv.SetKeepAlivesEnabled(false)
	go func(srv *http.Server) { _ = srv.Serve(ln) }(p.srv)
}

// refuse stops listening and closes every connection: the gateway's
// dials are refused until resume.
func (p *proxy) refuse() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// resume listens again on the same address.
func (p *proxy) resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("the fault proxy was stopped")
	}
	if p.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("the fault proxy cannot listen on %s again: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// close stops the proxy for good: a resume after it (a scenario that an
// interrupt overtook) does not listen again.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.refuse()
}

// plan sets the faults of an operation's next arrivals, in order; the
// arrivals after them pass.
func (p *proxy) plan(op string, steps ...step) {
	p.mu.Lock()
	p.steps[op] = append(p.steps[op], steps...)
	p.mu.Unlock()
}

// clear drops the faults planned for op that no arrival took.
func (p *proxy) clear(op string) {
	p.mu.Lock()
	delete(p.steps, op)
	p.mu.Unlock()
}

// countsOf returns what the proxy saw of op.
func (p *proxy) countsOf(op string) opCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.counts[op]; c != nil {
		return *c
	}
	return opCounts{}
}

// waitAnswered waits until the upstream has answered op n times, or
// limit passes; it reports whether it did.
func (p *proxy) waitAnswered(op string, n int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	t := time.AfterFunc(limit, func() { p.mu.Lock(); p.answered.Broadcast(); p.mu.Unlock() })
	defer t.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for (p.counts[op] == nil || p.counts[op].Answered < n) && time.Now().Before(deadline) {
		p.answered.Wait()
	}
	return p.counts[op] != nil && p.counts[op].Answered >= n
}

// next takes the fault for op's arrival and counts it.
func (p *proxy) next(op string) step {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.counts[op]
	if c == nil {
		c = &opCounts{}
		p.counts[op] = c
	}
	c.Arrived++
	var s step
	if q := p.steps[op]; len(q) > 0 {
		s, p.steps[op] = q[0], q[1:]
	}
	return s
}

func (p *proxy) count(op string, fn func(c *opCounts)) {
	p.mu.Lock()
	fn(p.counts[op])
	p.answered.Broadcast()
	p.mu.Unlock()
}

// hopHeaders are not forwarded by a proxy (RFC 9110 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *proxy) handle(w http.ResponseWriter, r *http.Request) {
	op := r.Header.Get(opHeader)
	s := p.next(op)
	if s.fault == unavailable {
		p.note(op, "proxy: answered 503 with Retry-After: 1 itself (the upstream is down)")
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the upstream is down (idemgate drill)", http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAnswer))
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	target := *p.upstream
	target.Path, target.RawPath = r.URL.Path, r.URL.RawPath
	target.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, target.String(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Header.Del(opHeader)
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	p.count(op, func(c *opCounts) { c.Reached++ })
	resp, err := p.client.Do(out)
	if err != nil {
		p.note(op, "proxy: the upstream did not answer: "+errText(err))
		panic(http.ErrAbortHandler)
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	if err != nil {
		p.note(op, "proxy: the upstream's answer broke off: "+errText(err))
		panic(http.ErrAbortHandler)
	}
	p.count(op, func(c *opCounts) {
		c.Answered++
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			c.OK++
		}
		if s.fault == dropAnswer {
			c.Dropped++
		}
	})
	switch s.fault {
	case dropAnswer:
		p.note(op, fmt.Sprintf("proxy: the upstream answered %d; the connection to the gateway is dropped before it gets the answer", resp.StatusCode))
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		panic(http.ErrAbortHandler)
	case delayAnswer:
		p.note(op, fmt.Sprintf("proxy: the upstream answered %d; the answer is held %s", resp.StatusCode, s.delay))
		select {
		case <-time.After(s.delay):
		case <-r.Context().Done():
			p.note(op, "proxy: the gateway went away while the answer was held")
			return
		}
	default:
		p.note(op, fmt.Sprintf("proxy: forwarded; the upstream answered %d", resp.StatusCode))
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// errText is an error for the timeline without the URL a *url.Error
// repeats.
func errText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
