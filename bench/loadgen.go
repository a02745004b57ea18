package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// A loader drives one load run.
type loader interface {
	run(spec loadSpec) *loadResult
	describe() string
}

// goLoader is the benchmark's own closed-loop HTTP/1.1 load generator,
// used when wrk is not installed (and for the memory phase, which needs
// an exact number of requests). It runs in this process, next to the
// upstream.
type goLoader struct{}

func (goLoader) run(spec loadSpec) *loadResult { return runLoad(spec) }

func (goLoader) describe() string { return "the bench's own Go load generator" }

// response is what the load generator reads of an answer.
type response struct {
	status   int
	replayed bool // Idempotent-Replayed: true
	close    bool // Connection: close
}

// loadResult is one load run against one address.
type loadResult struct {
	requests  int           // answered within the duration
	elapsed   time.Duration // from the first request to the last answer
	p50, p99  time.Duration
	latencies []time.Duration // Go generator: one per answered request
	statuses  map[int]int     // Go generator: answers by status
	replayed  int             // Go generator: answers with Idempotent-Replayed: true
	// coarse: only over399 is known of the answers (wrk), not statuses
	// and replayed.
	coarse   bool
	over399  int           // wrk: answers with a status of 400 or more
	errors   int           // connection or protocol errors
	firstErr error         //
	genCPU   time.Duration // CPU time of a load generator process of its own (-1: none)
}

// rps is the throughput of the run.
func (r *loadResult) rps() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.requests) / r.elapsed.Seconds()
}

// loadSpec says how to drive one run.
type loadSpec struct {
	addr     string        // host:port
	conns    int           // keep-alive connections, each with one request outstanding
	threads  int           // wrk: threads
	cpus     string        // wrk: CPUs to run on (taskset -c), "" for any
	duration time.Duration // requests are sent until this much time has passed
	limit    int           // Go generator: when > 0, stop after this many requests in all
	req      requestSpec
}

// ioGrace bounds a request that is still outstanding when the duration ends.
const ioGrace = 10 * time.Second

// runLoad drives spec.conns keep-alive connections, each sending its next
// request as soon as the previous answer is read (a closed loop, as wrk
// does), until the duration is over or the limit is reached. Every read and
// write has a deadline, so the run ends on its own even against a server
// that stops answering.
func runLoad(spec loadSpec) *loadResult {
	var (
		mu     sync.Mutex
		total  = &loadResult{statuses: map[int]int{}, genCPU: -1}
		mk     = spec.req.raw()
		wg     sync.WaitGroup
		issued = newBudget(spec.limit)
	)
	start := time.Now()
	deadline := start.Add(spec.duration)
	for c := range spec.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{conn: c, spec: spec, request: mk, deadline: deadline, budget: issued}
			w.run()
			mu.Lock()
			defer mu.Unlock()
			total.merge(&w.res)
		}()
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	if spec.limit <= 0 && total.elapsed > spec.duration {
		// Answers that arrive after the deadline are not counted; do not
		// count the time spent waiting for them either.
		total.elapsed = spec.duration
	}
	slices.Sort(total.latencies)
	total.p50, total.p99 = percentile(total.latencies, 0.50), percentile(total.latencies, 0.99)
	return total
}

func (r *loadResult) merge(o *loadResult) {
	r.requests += o.requests
	r.latencies = append(r.latencies, o.latencies...)
	for s, n := range o.statuses {
		r.statuses[s] += n
	}
	r.replayed += o.replayed
	r.errors += o.errors
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
}

// budget hands out at most n requests in all (unlimited when n <= 0).
type budget struct {
	mu   sync.Mutex
	left int
	on   bool
}

func newBudget(n int) *budget { return &budget{left: n, on: n > 0} }

func (b *budget) take() bool {
	if !b.on {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left <= 0 {
		return false
	}
	b.left--
	return true
}

// worker is one connection of a run.
type worker struct {
	conn     int
	spec     loadSpec
	request  requestFunc
	deadline time.Time
	budget   *budget
	res      loadResult

	nc  net.Conn
	br  *bufio.Reader
	buf []byte
}

func (w *worker) run() {
	w.res.statuses = map[int]int{}
	w.res.latencies = make([]time.Duration, 0, 4096)
	defer w.closeConn()
	seq := 0
	// At most one failed connection attempt in a row per 10ms, so a server
	// that refuses connections cannot turn this into a busy loop.
	for time.Now().Before(w.deadline) {
		if !w.budget.take() {
			return
		}
		if w.nc == nil {
			if err := w.dial(); err != nil {
				w.fail(err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
		}
		w.buf = w.request(w.buf[:0], w.conn, seq)
		seq++
		began := time.Now()
		resp, err := w.roundTrip()
		if err != nil {
			w.fail(err)
			w.closeConn()
			continue
		}
		done := time.Now()
		if done.After(w.deadline) && w.spec.limit <= 0 {
			return // answered after the run ended: not counted
		}
		w.res.requests++
		w.res.latencies = append(w.res.latencies, done.Sub(began))
		w.res.statuses[resp.status]++
		if resp.replayed {
			w.res.replayed++
		}
		if resp.close {
			w.closeConn()
		}
	}
}

func (w *worker) fail(err error) {
	w.res.errors++
	if w.res.firstErr == nil {
		w.res.firstErr = err
	}
}

func (w *worker) dial() error {
	nc, err := net.DialTimeout("tcp", w.spec.addr, 5*time.Second)
	if err != nil {
		return err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	w.nc = nc
	w.br = bufio.NewReaderSize(nc, 16<<10)
	return nil
}

func (w *worker) closeConn() {
	if w.nc != nil {
		_ = w.nc.Close()
		w.nc, w.br = nil, nil
	}
}

func (w *worker) roundTrip() (response, error) {
	end := time.Now().Add(ioGrace)
	if w.spec.limit <= 0 {
		end = w.deadline.Add(ioGrace)
	}
	if err := w.nc.SetDeadline(end); err != nil {
		return response{}, err
	}
	if _, err := w.nc.Write(w.buf); err != nil {
		return response{}, err
	}
	return readResponse(w.br)
}

// readResponse reads one HTTP/1.1 response with http.ReadResponse and
// discards its body. 1xx answers are skipped.
func readResponse(br *bufio.Reader) (response, error) {
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return response{}, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return response{}, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			continue
		}
		return response{
			status:   resp.StatusCode,
			replayed: resp.Header.Get("Idempotent-Replayed") == "true",
			close:    resp.Close,
		}, nil
	}
}
