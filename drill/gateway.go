package drill

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/proc"
)

// gateway is the drill's own gateway: this binary with the drill file's
// rules, on a temporary embedded store or the drill file's Redis, in
// front of the fault proxy. The drill never touches another gateway.
type gateway struct {
	bin    string
	dir    string
	url    string // http://127.0.0.1:port
	admin  string // http://127.0.0.1:port of its admin API
	env    []string
	starts int
	client *http.Client

	mu     sync.Mutex
	p      *proc.Process // the running process, under mu
	closed bool          // stop was called: nothing starts any more
}

// gatewayCaddyfile: admin port, gateway port, rules file, store, proxy
// address. The secret and a Redis URL come from the environment, so that
// neither is written to disk.
const gatewayCaddyfile = `{
	admin 127.0.0.1:%d
	persist_config off
	default_bind 127.0.0.1
}

http://127.0.0.1:%d {
	idempotency {
		rules %s
		secret {env.IDEMGATE_DRILL_SECRET}
		store %s
	}
	reverse_proxy %s
}
`

// newGateway writes the gateway's Caddyfile into dir. redis is the
// expanded Redis URL, "" for an embedded store in dir.
func newGateway(bin, dir, rules, redis, secret, proxyAddr string) (*gateway, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	storeArg := strconv.Quote(filepath.Join(dir, "store"))
	env := []string{"XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir, "IDEMGATE_DRILL_SECRET=" + secret}
	if redis != "" {
		// A key prefix of the run's own: the run's secret is its own,
		// and a store refuses a secret other than its records' (so the
		// drill never shares the keys of a gateway on that Redis).
		var run [4]byte
		_, _ = rand.Read(run[:])
		storeArg = "{$IDEMGATE_DRILL_REDIS}\n\t\tkey_prefix idemgate-drill-" + hex.EncodeToString(run[:]) + ":"
		env = append(env, "IDEMGATE_DRILL_REDIS="+redis)
	} else {
		storeArg = "embedded " + storeArg
	}
	cf := filepath.Join(dir, "Caddyfile")
	text := fmt.Sprintf(gatewayCaddyfile, adminPort, port, strconv.Quote(rules), storeArg, proxyAddr)
	if err := os.WriteFile(cf, []byte(text), 0o600); err != nil {
		return nil, err
	}
	return &gateway{
		bin: bin, dir: dir, env: env,
		url:    fmt.Sprintf("http://127.0.0.1:%d", port),
		admin:  fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		client: &http.Client{Timeout: 5 * time.Second},
	}, nil
}

// start starts the gateway and waits, at most 30s, until its admin API
// lists records (the handler and its store are up) and its port takes
// connections.
func (g *gateway) start() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errStopped
	}
	g.starts++
	p, err := proc.Start(fmt.Sprintf("gateway-%d", g.starts), proc.Options{LogDir: g.dir, Env: g.env},
		g.bin, "run", "--config", filepath.Join(g.dir, "Caddyfile"), "--adapter", "caddyfile")
	if err != nil {
		g.mu.Unlock()
		return err
	}
	g.p = p
	g.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := g.client.Get(g.admin + "/idempotency/records?limit=1")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if c, err := net.DialTimeout("tcp", strings.TrimPrefix(g.url, "http://"), time.Second); err == nil {
					c.Close()
					return nil
				}
			}
		}
		switch {
		case !p.Running():
			return fmt.Errorf("the drill's gateway exited at start:\n%s", p.Tail(15))
		case time.Now().After(deadline):
			p.Stop()
			return fmt.Errorf("the drill's gateway is not ready after 30s:\n%s", p.Tail(15))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// errStopped: the drill's gateway was stopped for good (the drill was
// interrupted); it does not start again.
var errStopped = errors.New("the drill's gateway was stopped")

// kill ends the gateway with SIGKILL, as a crash would.
func (g *gateway) kill() {
	g.mu.Lock()
	p := g.p
	g.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// stop ends the gateway gracefully, for good: a start after it (a
// restart scenario that an interrupt overtook) starts nothing. Calling it
// again does nothing more.
func (g *gateway) stop() {
	g.mu.Lock()
	g.closed = true
	p := g.p
	g.mu.Unlock()
	if p != nil {
		p.Stop()
	}
}

// record is what the drill reads of a record in the admin API.
type record struct {
	ID         string    `json:"id"`
	Route      string    `json:"route"`
	State      string    `json:"state"`
	Reason     string    `json:"reason"`
	Attempts   int64     `json:"attempts"`
	Executions int64     `json:"executions"`
	Status     int       `json:"status"`
	ExternalID string    `json:"external_id"`
	LeaseUntil time.Time `json:"lease_until"`
}

// record reads the record id from the admin API; nil when there is none.
func (g *gateway) record(id string) (*record, error) {
	resp, err := g.client.Get(g.admin + "/idempotency/records/" + id)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("the admin API answers %s for record %s", resp.Status, id)
	}
	var rec record
	if err := json.NewDecoder(resp.Body).Decode(&rec); err != nil {
		return nil, fmt.Errorf("the admin API's record %s: %w", id, err)
	}
	return &rec, nil
}
