package main

import (
	"bufio"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/proc"
)

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    response
		rest    string // what must be left unread for the next response
		wantErr bool
	}{
		{
			name: "content length",
			raw:  "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}NEXT",
			want: response{status: 201},
			rest: "NEXT",
		},
		{
			name: "replayed",
			raw:  "HTTP/1.1 201 Created\r\nidempotent-replayed: true\r\nContent-Length: 0\r\n\r\nNEXT",
			want: response{status: 201, replayed: true},
			rest: "NEXT",
		},
		{
			name: "replayed false is not replayed",
			raw:  "HTTP/1.1 201 Created\r\nIdempotent-Replayed: false\r\nContent-Length: 0\r\n\r\n",
			want: response{status: 201},
		},
		{
			name: "chunked with trailer",
			raw:  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\nNEXT",
			want: response{status: 200},
			rest: "NEXT",
		},
		{
			name: "1xx skipped",
			raw:  "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n{}",
			want: response{status: 409},
		},
		{
			name: "connection close",
			raw:  "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
			want: response{status: 503, close: true},
		},
		{
			name: "no length reads to EOF",
			raw:  "HTTP/1.0 200 OK\r\n\r\nbody until close",
			want: response{status: 200, close: true},
		},
		{
			name: "204 has no body",
			raw:  "HTTP/1.1 204 No Content\r\n\r\nNEXT",
			want: response{status: 204},
			rest: "NEXT",
		},
		{name: "garbage", raw: "SMTP ready\r\n\r\n", wantErr: true},
		{name: "bad status", raw: "HTTP/1.1 2x1 Created\r\n\r\n", wantErr: true},
		{name: "bad length", raw: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", wantErr: true},
		{name: "truncated body", raw: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", wantErr: true},
		{name: "empty", raw: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tt.raw))
			got, err := readResponse(br)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("readResponse = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("readResponse = %+v, want %+v", got, tt.want)
			}
			if rest, _ := io.ReadAll(br); string(rest) != tt.rest {
				t.Errorf("left %q unread, want %q", rest, tt.rest)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.5, 7 * time.Millisecond},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.5, 5 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0, 1 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 1, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.sorted, tt.q); got != tt.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tt.sorted, tt.q, got, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.xs...)
		if got := median(tt.xs); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.xs, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.xs[i] {
				t.Fatalf("median modified its input: %v", tt.xs)
			}
		}
	}
}

func TestSummarizeRounds(t *testing.T) {
	rounds := []roundStats{
		{rps: 100, p50: 2 * time.Millisecond, p99: 9 * time.Millisecond, requests: 300, cmdsPR: 16, scriptPR: 2, cpu: [numProcs]time.Duration{100 * time.Microsecond, 50 * time.Microsecond, -1, 5 * time.Microsecond}},
		{rps: 300, p50: 1 * time.Millisecond, p99: 5 * time.Millisecond, requests: 900, bad: 1, cmdsPR: 18, scriptPR: 2, cpu: [numProcs]time.Duration{200 * time.Microsecond, 70 * time.Microsecond, -1, 7 * time.Microsecond}},
		{rps: 200, p50: 3 * time.Millisecond, p99: 7 * time.Millisecond, requests: 600, errors: 2, cmdsPR: 17, scriptPR: 2, cpu: [numProcs]time.Duration{150 * time.Microsecond, 60 * time.Microsecond, -1, 6 * time.Microsecond}},
	}
	s := summarizeRounds(rounds)
	want := variantSummary{rps: 200, p50: 2, p99: 7, cmdsPR: 17, scriptPR: 2, requests: 1800, errors: 2, bad: 1, cpu: [numProcs]float64{150, 60, -1, 6}}
	if s != want {
		t.Errorf("summarizeRounds = %+v, want %+v", s, want)
	}
}

func TestParseCommandStats(t *testing.T) {
	// Commands a script runs are counted one by one; INFO (the bench's
	// own reads) is left out.
	info := "# Commandstats\r\n" +
		"cmdstat_hset:calls=10,usec=40,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=2000,usec=35000,usec_per_call=17.50,rejected_calls=0,failed_calls=3\r\n" +
		"cmdstat_eval:calls=3,usec=600,usec_per_call=200.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha_ro:calls=7,usec=7,usec_per_call=1.00\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=7,usec_per_call=7.00\r\n" +
		"cmdstat_info:calls=99,usec=7,usec_per_call=1.00\r\n"
	if got, want := parseCommandStats(info), (commandStats{commands: 10 + 2000 + 3 + 7 + 1, scripts: 2010}); got != want {
		t.Errorf("parseCommandStats = %+v, want %+v", got, want)
	}
	if got := parseCommandStats("# Commandstats\r\n"); got != (commandStats{}) {
		t.Errorf("no commands: %+v", got)
	}
}

func TestParseStat(t *testing.T) {
	// Field 2 (the command) may hold spaces and parentheses.
	stat := "4242 (idem gate) (x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 12 0 100 0 0"
	got, err := parseStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want {
		t.Errorf("parseStat = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 12"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) = nil error", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\tidemgate\nVmPeak:\t  900000 kB\nVmHWM:\t   90112 kB\nVmRSS:\t   81920 kB\nThreads:\t9\n"
	cur, peak, err := parseStatus(bufio.NewScanner(strings.NewReader(status)))
	if err != nil || cur != 81920 || peak != 90112 {
		t.Errorf("parseStatus = %d, %d, %v; want 81920, 90112, nil", cur, peak, err)
	}
	if _, _, err := parseStatus(bufio.NewScanner(strings.NewReader("Name:\tx\n"))); err == nil {
		t.Error("no VmRSS: want an error")
	}
}

func TestCPUTimeOfSelf(t *testing.T) {
	// The load generator reads children's CPU time from /proc; reading our
	// own must work and never go backwards.
	a, err := cpuTime(os.Getpid())
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for i := 0; i < 3_000_000; i++ {
		sinkInt += i
	}
	b, err := cpuTime(os.Getpid())
	if err != nil || b < a {
		t.Errorf("cpuTime went from %v to %v (%v)", a, b, err)
	}
}

var sinkInt int

// TestRunLoad drives a loopback server with a request limit (so the test
// ends on its own, whatever the machine's speed) and checks the counts.
func TestRunLoad(t *testing.T) {
	var served atomic.Int64
	var keys seenKeys
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		keys.add(r.Header.Get("Idempotency-Key"))
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/replay" {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"D-1"}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	e := &env{runID: "test"}
	for _, v := range []variant{
		{name: "unique", path: "/x", keys: "unique", wantStatus: 201},
		{name: "replay", path: "/replay", keys: "replay", wantStatus: 201, wantReplayed: true},
	} {
		keys.reset()
		res := runLoad(loadSpec{addr: addr, conns: 4, duration: time.Minute, limit: 200, req: e.requestSpec(v, addr, "t")})
		if res.requests != 200 || res.errors != 0 || res.statuses[201] != 200 {
			t.Fatalf("%s: %d requests, %d errors (%v), statuses %v; want 200 answered 201", v.name, res.requests, res.errors, res.firstErr, res.statuses)
		}
		if len(res.latencies) != 200 || res.rps() <= 0 || res.p50 <= 0 || res.p99 < res.p50 {
			t.Errorf("%s: %d latencies, %v req/s, p50 %v, p99 %v", v.name, len(res.latencies), res.rps(), res.p50, res.p99)
		}
		if bad := badAnswers(v, res); bad != 0 {
			t.Errorf("%s: %d bad answers", v.name, bad)
		}
		switch n := keys.count(); v.keys {
		case "unique":
			if n != 200 {
				t.Errorf("unique keys: %d distinct of 200", n)
			}
		case "replay":
			if n > replayKeys {
				t.Errorf("replay keys: %d distinct, want at most %d", n, replayKeys)
			}
		}
	}
	if served.Load() != 400 {
		t.Errorf("server saw %d requests, want 400", served.Load())
	}
}

// TestRunLoadStopsWhenRefused: a closed port gives errors, and the run
// still ends at its duration.
func TestRunLoadStopsWhenRefused(t *testing.T) {
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	v := variant{name: "x", path: "/", keys: "unique", wantStatus: 201}
	e := &env{runID: "test"}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	res := runLoad(loadSpec{addr: addr, conns: 2, duration: 200 * time.Millisecond, req: e.requestSpec(v, addr, "t")})
	if res.requests != 0 || res.errors == 0 || res.firstErr == nil {
		t.Errorf("refused: %d requests, %d errors, %v", res.requests, res.errors, res.firstErr)
	}
	var opErr interface{ Timeout() bool }
	if errors.As(res.firstErr, &opErr) && opErr.Timeout() {
		t.Errorf("refused connection reported as a timeout: %v", res.firstErr)
	}
}

func TestSelectVariants(t *testing.T) {
	all, err := selectVariants("", "")
	if err != nil || len(all) != len(allVariants) {
		t.Fatalf("default: %d variants, %v", len(all), err)
	}
	two, err := selectVariants("plain, embedded-execute", "")
	if err != nil || len(two) != 2 || two[0].name != "plain" || two[1].name != "embedded-execute" {
		t.Fatalf("plain,embedded-execute: %+v, %v", two, err)
	}
	// Every set has its plain variant, and every ratio line names variants.
	for _, set := range sets {
		if v, ok := findVariant(plainOf(set)); !ok || v.set != set {
			t.Errorf("set %s: plain variant %q missing", set, plainOf(set))
		}
	}
	for _, l := range ratioLines {
		n, okn := findVariant(l.num)
		d, okd := findVariant(l.den)
		if !okn || !okd || n.set != d.set {
			t.Errorf("ratio %s/%s: variants missing or in different sets", l.num, l.den)
		}
	}
	if _, err := selectVariants("plain,nope", ""); err == nil {
		t.Error("unknown variant accepted")
	}
	// -sets: only the named sets' variants, in their order.
	onlyTwo, err := selectVariants("", "two")
	if err != nil || len(onlyTwo) != 8 {
		t.Fatalf("-sets two: %d variants, %v", len(onlyTwo), err)
	}
	for _, v := range onlyTwo {
		if v.set != setTwo {
			t.Errorf("-sets two gave %s of set %s", v.name, v.set)
		}
	}
	for _, bad := range []struct{ variants, sets string }{{"", "nope"}, {"plain", "two"}} {
		if _, err := selectVariants(bad.variants, bad.sets); err == nil {
			t.Errorf("-variants %q -sets %q accepted", bad.variants, bad.sets)
		}
	}
}

func TestTwoTableAndSideBySide(t *testing.T) {
	cpu := func(gw float64) [numProcs]float64 { return [numProcs]float64{gw, -1, 0, 0} }
	r := &report{o: options{conns: 64, conns2: 2}, e: &env{}, sum: map[string]variantSummary{
		"execute":              {rps: 4000, p50: 15, p99: 30, cpu: cpu(300)},
		"embedded-execute":     {rps: 5000, p50: 12, p99: 25, cpu: cpu(250)},
		"two-plain":            {rps: 4000, p50: 0.4, p99: 1, cpu: [numProcs]float64{100, 0, 0, 0}},
		"two-execute":          {rps: 2000, p50: 0.9, p99: 2, cpu: [numProcs]float64{320, 35, 0, 0}},
		"two-embedded-execute": {rps: 500, p50: 3.9, p99: 8, cpu: cpu(180)},
		"two-embedded-replay":  {rps: 6000, p50: 0.3, p99: 0.7, cpu: cpu(-1)},
	}}
	for _, name := range []string{"execute", "embedded-execute", "two-plain", "two-execute", "two-embedded-execute", "two-embedded-replay"} {
		v, _ := findVariant(name)
		r.vs = append(r.vs, v)
	}
	tests := []struct {
		name      string
		p50, cpu  float64
		cpuOK, ok bool
	}{
		{"two-execute", 0.5, 220, true, true},
		{"two-embedded-execute", 3.5, 80, true, true},
		{"two-embedded-replay", -0.1, 0, false, true},
		{"replay", 0, 0, false, false}, // did not run
	}
	for _, tt := range tests {
		p50, c, cok, ok := r.addedOverPlain(tt.name)
		if math.Abs(p50-tt.p50) > 1e-9 || c != tt.cpu || cok != tt.cpuOK || ok != tt.ok {
			t.Errorf("addedOverPlain(%s) = %v, %v, %v, %v; want %v, %v, %v, %v", tt.name, p50, c, cok, ok, tt.p50, tt.cpu, tt.cpuOK, tt.ok)
		}
	}
	for _, tt := range []struct {
		name string
		cpu  float64
		ok   bool
	}{
		{"two-execute", 255, true},         // 320 + 35 of Redis over 100 + 0
		{"two-embedded-execute", 80, true}, // no Redis: the gateway's alone
		{"two-embedded-replay", 0, false},  // no gateway figure
		{"two-plain", 0, false},            // plain over itself
		{"replay", 0, false},               // did not run
	} {
		c, ok := r.addedCPU(tt.name)
		if c != tt.cpu || ok != tt.ok {
			t.Errorf("addedCPU(%s) = %v, %v; want %v, %v", tt.name, c, ok, tt.cpu, tt.ok)
		}
	}
	table := r.twoTable(false)
	for _, want := range []string{
		"two-execute                2000   0.900   2.000     320       35    +0.500     +220     +255  201\n",
		"two-embedded-execute        500   3.900   8.000     180        -    +3.500      +80      +80  201\n",
		"two-embedded-replay        6000   0.300   0.700       -        -         -        -        -  201 replayed\n",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("twoTable lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "embedded-execute      5000") {
		t.Errorf("twoTable shows a variant of another set:\n%s", table)
	}
	if strings.Contains(r.table(false), "two-") {
		t.Errorf("the main table shows the two set:\n%s", r.table(false))
	}
	want := "embedded-execute vs execute (64 connections): req/s 5000 vs 4000 (1.25x), p50 12.000 vs 15.000 ms (-3.000), p99 25.000 vs 30.000 ms, gateway µs/req 250 vs 300\n" +
		"embedded-execute vs execute (2 connections): req/s 500 vs 2000 (0.25x), p50 3.900 vs 0.900 ms (+3.000), p99 8.000 vs 2.000 ms, gateway µs/req 180 vs 320\n"
	if got := r.sideBySide(); got != want {
		t.Errorf("sideBySide =\n%s\nwant\n%s", got, want)
	}
}

func TestRequestSpecRaw(t *testing.T) {
	e := &env{runID: "r1"}
	v := variant{name: "execute", path: "/v1/deals", keys: "unique"}
	mk := e.requestSpec(v, "127.0.0.1:1", "t").raw()
	a, b := string(mk(nil, 0, 1)), string(mk(nil, 1, 0))
	if a == b {
		t.Error("two requests of a unique-key variant are equal")
	}
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(a)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(req.Body)
	if req.Method != "POST" || req.URL.Path != "/v1/deals" || string(body) != requestBody || req.Header.Get("Idempotency-Key") == "" {
		t.Errorf("request: %s %s key %q body %d bytes", req.Method, req.URL.Path, req.Header.Get("Idempotency-Key"), len(body))
	}
}

// seenKeys collects the distinct keys a server saw.
type seenKeys struct {
	mu   sync.Mutex
	keys map[string]bool
}

func (s *seenKeys) add(k string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = map[string]bool{}
	}
	s.keys[k] = true
}

func (s *seenKeys) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = nil
}

func (s *seenKeys) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func TestKeySetMatchesRequestSpec(t *testing.T) {
	e := &env{runID: "0a1b2c3d"}
	for _, v := range allVariants {
		spec := e.requestSpec(v, "127.0.0.1:1", v.name+"r3")
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(spec.raw()(nil, 7, 12)))))
		if err != nil {
			t.Fatal(err)
		}
		if got := keySet(req.Header.Get("Idempotency-Key")); got != spec.set() {
			t.Errorf("%s: key %q is in set %q, want %q", v.name, req.Header.Get("Idempotency-Key"), got, spec.set())
		}
	}
	if keySet("nodash") != "" {
		t.Error("a key without dashes has a set")
	}
}

func TestBusyLine(t *testing.T) {
	r := &report{e: &env{}, sum: map[string]variantSummary{
		"pinned-plain": {rps: 5000, cpu: [numProcs]float64{150, 0, 80, 20}},
		"plain":        {rps: 9000, cpu: [numProcs]float64{100, 0, 80, 20}},
	}}
	for _, name := range []string{"plain", "pinned-plain"} {
		v, _ := findVariant(name)
		r.vs = append(r.vs, v)
	}
	// 150 µs × 5000/s = 75% of one CPU; the shared set is not listed.
	if got, want := r.busyLine(), "pinned set, the gateway's CPU busy: plain 75%\n"; got != want {
		t.Errorf("busyLine = %q, want %q", got, want)
	}
}

// TestFsyncFloor: the floor measurement syncs every append and leaves
// no file behind.
func TestFsyncFloor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := measureFsyncFloor(dir, 20)
	if err != nil {
		t.Fatal(err)
	}
	if f.n != 20 || f.p50 <= 0 || f.p99 < f.p50 || f.cpu < 0 {
		t.Fatalf("floor %+v", f)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left %d files in %s", len(left), dir)
	}
	if line := f.line(dir); !strings.Contains(line, "20 × 300-byte append + fdatasync") {
		t.Fatalf("line %q", line)
	}
}
