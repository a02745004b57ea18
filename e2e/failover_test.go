package e2e

import (
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// linkProxy forwards TCP connections to a Redis server until cut: from
// then on it drops every byte in both directions and keeps the
// connections open, as a partition would. It carries the replication link
// between a master and its replica.
type linkProxy struct {
	addr string
	port int
	cut  atomic.Bool
}

func startLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p := &linkProxy{addr: l.Addr().String(), port: l.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			t.Cleanup(func() { _ = in.Close(); _ = out.Close() })
			go p.pipe(out, in)
			go p.pipe(in, out)
		}
	}()
	return p
}

// pipe copies src to dst until src ends, dropping what it reads once cut.
func (p *linkProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.cut.Load() {
				_ = dst.Close()
			}
			return
		}
	}
}

// failoverDelivery is one first delivery of a key in TestSentinelFailoverStrict.
type failoverDelivery struct {
	key      string
	strict   bool
	status   int // 0: transport error
	sent, at time.Time
}

// goRedisPlainLine matches a line of go-redis's own stderr logger.
var goRedisPlainLine = regexp.MustCompile(`(?m)^redis: \d{4}/\d\d/\d\d `)

// TestSentinelFailoverStrict: a master, one replica whose replication link
// is cut 350 ms before the master is killed with SIGKILL, three sentinels,
// and two gateways: one with `wait_replicas 1 strict`, one without
// wait_replicas. Workers send new keys through both until the promoted
// replica serves again. Every key acknowledged with 201 is then delivered
// again: through the strict gateway none executes twice (its claims after
// the cut were refused, never forwarded); through the plain one the keys
// lost with the master are counted and reported. Completed keys replay on
// the strict gateway while its replica is gone, before and after the
// kill. Both gateways log the outage at warn when it starts and ends, and
// no plain-text go-redis line.
func TestSentinelFailoverStrict(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	link := startLinkProxy(t, master.Addr)
	replica := redistest.StartReplica(t, &redistest.Server{Addr: link.addr, Port: link.port})
	sentinels := redistest.StartSentinels(t, master, "idem", redistest.SentinelOptions{
		Replicas: 1, DownAfter: time.Second, FailoverTimeout: 3 * time.Second,
	})
	var addrs []string
	for _, s := range sentinels {
		addrs = append(addrs, s.Addr)
	}
	up := newTopoUpstream(t)
	store := strings.Join(addrs, " ")
	plain := startGateway(t, gatewayConfig{store: store, extra: withSecret("master_name idem\n\t\top_timeout 1s"),
		upstream: up.addr(), rules: topoRules})
	strict := startGateway(t, gatewayConfig{store: store, extra: withSecret("master_name idem\n\t\top_timeout 1s\n\t\twait_replicas 1 strict\n\t\twait_timeout 100ms"),
		upstream: up.addr(), rules: topoRules})
	gws := map[bool]*gateway{false: plain, true: strict}

	// A completed key to replay on the strict gateway while its replica is gone.
	body := []byte(`{"title":"failover"}`)
	if r := send(t, "POST", strict.url+"/deals", body, "Idempotency-Key", "done-before"); r.status != http.StatusCreated {
		t.Fatalf("strict gateway with its replica: %d %s", r.status, r.body)
	}
	replays := func(phase string) {
		t.Helper()
		r := send(t, "POST", strict.url+"/deals", body, "Idempotency-Key", "done-before")
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay on the strict gateway %s: %d %s", phase, r.status, r.body)
		}
	}

	const workers = 8
	var (
		mu         sync.Mutex
		deliveries []failoverDelivery
		okAfter    atomic.Int64
		killed     atomic.Bool
	)
	httpc := &http.Client{Timeout: 10 * time.Second}
	stop := background(workers, 100000, 2*time.Millisecond, func(w, i int) {
		d := failoverDelivery{key: fmt.Sprintf("fs-%d-%d", w, i), strict: w%2 == 1, sent: time.Now()}
		r, _ := do(httpc, "POST", gws[d.strict].url+"/deals", body, "Idempotency-Key", d.key)
		d.status, d.at = r.status, time.Now()
		mu.Lock()
		deliveries = append(deliveries, d)
		mu.Unlock()
		if killed.Load() && !d.strict && d.status == http.StatusCreated {
			okAfter.Add(1)
		}
	})
	time.Sleep(time.Second)
	cutAt := time.Now()
	link.cut.Store(true)
	time.Sleep(350 * time.Millisecond)
	replays("with the replication link cut")
	killedAt := time.Now()
	master.Kill()
	killed.Store(true)

	var switchedAt time.Time
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if switchedAt.IsZero() && sentinels[0].MasterPort(t, "idem") == replica.Port {
			switchedAt = time.Now()
		}
		if !switchedAt.IsZero() && okAfter.Load() >= 100 {
			break
		}
	}
	stop()
	if switchedAt.IsZero() || okAfter.Load() == 0 {
		t.Fatalf("no failover within 20s of the kill: sentinel says master port %d (replica %d), %d successes since",
			sentinels[0].MasterPort(t, "idem"), replica.Port, okAfter.Load())
	}
	replays("after the failover, with no replica left")

	// The error window of each gateway, and its first success after the
	// kill, against the moment the sentinels named the new master.
	type window struct {
		failed, ok        int
		lastFail, firstOK time.Time
	}
	win := map[bool]*window{false: {}, true: {}}
	for _, d := range deliveries {
		w := win[d.strict]
		switch {
		case d.at.Before(killedAt):
		case d.status == http.StatusCreated:
			w.ok++
			if d.sent.After(killedAt) && (w.firstOK.IsZero() || d.at.Before(w.firstOK)) {
				w.firstOK = d.at
			}
		default:
			w.failed++
			if d.at.After(w.lastFail) {
				w.lastFail = d.at
			}
		}
	}
	p := win[false]
	t.Logf("plain gateway: %d requests failed after the kill, the last %v after it; first success of a request sent after the kill: %v after it, %v after the sentinels' switch (seen %v after the kill)",
		p.failed, p.lastFail.Sub(killedAt).Round(time.Millisecond), p.firstOK.Sub(killedAt).Round(time.Millisecond),
		p.firstOK.Sub(switchedAt).Round(time.Millisecond), switchedAt.Sub(killedAt).Round(time.Millisecond))

	// Second delivery of every acknowledged key, through the plain
	// gateway (the strict one refuses new claims without a replica).
	var acked, twice [2]int
	var refusedAfterCut int
	for _, d := range deliveries {
		i := 0
		if d.strict {
			i = 1
		}
		if d.status != http.StatusCreated {
			if d.strict && d.sent.After(cutAt) && d.at.Before(killedAt) && d.status == http.StatusServiceUnavailable {
				refusedAfterCut++
			}
			if c := up.count(d.key); c != 0 && d.status != 0 {
				t.Errorf("%s answered %d but executed %d times", d.key, d.status, c)
			}
			continue
		}
		acked[i]++
		r := send(t, "POST", plain.url+"/deals", body, "Idempotency-Key", d.key)
		if r.status >= 500 {
			t.Errorf("second delivery of %s: %d %s", d.key, r.status, r.body)
		}
		if up.count(d.key) > 1 {
			twice[i]++
		}
	}
	t.Logf("without strict: %d keys acknowledged, %d executed twice after the failover; with wait_replicas 1 strict: %d acknowledged, %d executed twice, %d refused (503) between the cut and the kill",
		acked[0], twice[0], acked[1], twice[1], refusedAfterCut)
	if acked[1] == 0 || acked[0] == 0 {
		t.Fatalf("acknowledged %d plain and %d strict keys: the test saw no traffic", acked[0], acked[1])
	}
	if twice[1] != 0 {
		t.Errorf("%d keys acknowledged through the wait_replicas 1 strict gateway executed twice, want 0", twice[1])
	}
	if refusedAfterCut == 0 {
		t.Errorf("the strict gateway refused nothing between the cut of the replication link and the kill")
	}

	for name, gw := range map[string]*gateway{"plain": plain, "strict": strict} {
		logs := gw.logs.String()
		for _, want := range []string{"record store unavailable", "record store available again"} {
			found := false
			for _, line := range strings.Split(logs, "\n") {
				found = found || strings.Contains(line, want) && strings.Contains(line, `"level":"warn"`)
			}
			if !found {
				t.Errorf("%s gateway's log has no warn line %q", name, want)
			}
		}
		if m := goRedisPlainLine.FindString(logs); m != "" {
			t.Errorf("%s gateway's log has a plain-text go-redis line: %q", name, m)
		}
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, "record store available again") {
				t.Logf("%s gateway: %s", name, line)
			}
		}
	}
}
