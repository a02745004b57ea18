package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"
)

// A requestFunc appends one raw HTTP/1.1 request to dst. conn is the
// connection's number and seq the request's number on that connection, so
// every request of a run can get a key of its own.
type requestFunc func(dst []byte, conn, seq int) []byte

// response is what the load generator reads of an answer.
type response struct {
	status   int
	replayed bool // Idempotent-Replayed: true
	close    bool // Connection: close
}

// loadResult is one load run against one address.
type loadResult struct {
	requests  int             // answered within the duration
	elapsed   time.Duration   // from the first request to the last answer
	latencies []time.Duration // one per answered request, unsorted
	statuses  map[int]int
	replayed  int // answers with Idempotent-Replayed: true
	errors    int // connection or protocol errors (each ends a connection)
	firstErr  error
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
	duration time.Duration // requests are sent until this much time has passed
	limit    int           // when > 0, stop after this many requests in all
	request  requestFunc
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
		total  = &loadResult{statuses: map[int]int{}}
		wg     sync.WaitGroup
		issued = newBudget(spec.limit)
	)
	start := time.Now()
	deadline := start.Add(spec.duration)
	for c := range spec.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{conn: c, spec: spec, deadline: deadline, budget: issued}
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
		w.buf = w.spec.request(w.buf[:0], w.conn, seq)
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

var errMalformed = errors.New("malformed HTTP response")

// readResponse reads one HTTP/1.1 response and discards its body. It
// understands what the servers under test send: Content-Length or chunked
// bodies, and Connection: close. 1xx answers are skipped.
func readResponse(br *bufio.Reader) (response, error) {
	for {
		var resp response
		line, err := readLine(br)
		if err != nil {
			return resp, err
		}
		// "HTTP/1.1 201 Created"
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return resp, fmt.Errorf("%w: status line %q", errMalformed, line)
		}
		resp.status, err = strconv.Atoi(string(line[9:12]))
		if err != nil {
			return resp, fmt.Errorf("%w: status line %q", errMalformed, line)
		}
		length, chunked := int64(-1), false
		for {
			line, err = readLine(br)
			if err != nil {
				return resp, err
			}
			if len(line) == 0 {
				break
			}
			name, value, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				return resp, fmt.Errorf("%w: header line %q", errMalformed, line)
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
					return resp, fmt.Errorf("%w: Content-Length %q", errMalformed, value)
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				chunked = bytes.EqualFold(value, []byte("chunked"))
			case bytes.EqualFold(name, []byte("Connection")):
				resp.close = bytes.EqualFold(value, []byte("close"))
			case bytes.EqualFold(name, []byte("Idempotent-Replayed")):
				resp.replayed = bytes.Equal(value, []byte("true"))
			}
		}
		if resp.status >= 100 && resp.status < 200 {
			continue
		}
		switch {
		case resp.status == 204 || resp.status == 304:
		case chunked:
			if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(br)); err != nil {
				return resp, err
			}
			// Trailers, if any, end with an empty line.
			for {
				line, err := readLine(br)
				if err != nil {
					return resp, err
				}
				if len(line) == 0 {
					break
				}
			}
		case length >= 0:
			if _, err := br.Discard(int(length)); err != nil {
				return resp, err
			}
		default:
			// No length: the body runs until the server closes.
			if _, err := io.Copy(io.Discard, br); err != nil {
				return resp, err
			}
			resp.close = true
		}
		return resp, nil
	}
}

// readLine returns one CRLF-terminated line without its end. The slice is
// valid until the next read from br.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line longer than %d bytes", errMalformed, br.Size())
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return bytes.TrimRight(line, "\r\n"), nil
}
