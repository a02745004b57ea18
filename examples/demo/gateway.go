package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/proc"
)

// crmStats is the example CRM's GET /stats.
type crmStats struct {
	DealsCreated *int `json:"deals_created"`
	Requests     *int `json:"requests"`
}

// getStats reads GET base/stats and checks that it is the example CRM's
// answer. via is the answer's Via header (Caddy's reverse_proxy adds
// "1.1 Caddy").
func getStats(client *http.Client, base string) (deals int, via string, err error) {
	resp, err := client.Get(base + "/stats")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	via = resp.Header.Get("Via")
	if resp.StatusCode != http.StatusOK {
		return 0, via, fmt.Errorf("GET %s/stats: %s", base, resp.Status)
	}
	var st crmStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.DealsCreated == nil || st.Requests == nil {
		return 0, via, fmt.Errorf("GET %s/stats: not the example CRM's stats", base)
	}
	return *st.DealsCreated, via, nil
}

// probeRunning tells whether the gateway of `make run` answers at gateway:
// a Caddy that passes GET /stats through to the example CRM, and whose
// admin API (at admin) shows a server on the gateway's port with the
// idempotency handler and a reverse_proxy to crm in its routes. When it
// does not, why says what was found instead.
func probeRunning(client *http.Client, gateway, admin, crm string) (ok bool, why string) {
	u, err := url.Parse(gateway)
	if err != nil {
		return false, err.Error()
	}
	c, err := url.Parse(crm)
	if err != nil {
		return false, err.Error()
	}
	_, via, err := getStats(client, gateway)
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		return false, "nothing listens on " + u.Host
	case err != nil:
		return false, u.Host + " answers, but not as a gateway in front of the example CRM: " + err.Error()
	case !strings.Contains(via, "Caddy"):
		return false, u.Host + " answers with the example CRM's stats, but not through Caddy (Via: " + strconv.Quote(via) + ")"
	}
	if err := adminShowsGateway(client, admin, u.Port(), c.Host); err != nil {
		return false, u.Host + " is a Caddy in front of the example CRM, but " + err.Error()
	}
	return true, ""
}

// adminShowsGateway reads the HTTP servers of the config behind the admin
// API and looks for one listening on port whose routes use the
// idempotency handler and proxy to crm (host:port).
func adminShowsGateway(client *http.Client, admin, port, crm string) error {
	resp, err := client.Get(admin + "/config/apps/http/servers")
	if err != nil {
		return fmt.Errorf("its admin API does not answer: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("its admin API answers %s", resp.Status)
	}
	var servers map[string]struct {
		Listen []string        `json:"listen"`
		Routes json.RawMessage `json:"routes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&servers); err != nil {
		return fmt.Errorf("its admin API's config is not readable: %v", err)
	}
	for _, s := range servers {
		onPort := false
		for _, l := range s.Listen {
			onPort = onPort || strings.HasSuffix(l, ":"+port)
		}
		var routes bytes.Buffer
		if onPort && json.Compact(&routes, s.Routes) == nil &&
			bytes.Contains(routes.Bytes(), []byte(`"handler":"idempotency"`)) &&
			bytes.Contains(routes.Bytes(), []byte(`"dial":"`+crm+`"`)) {
			return nil
		}
	}
	return fmt.Errorf("its config (admin API %s) has no idempotency handler in front of %s on port %s", admin, crm, port)
}

// own is a gateway and a CRM the demo started for itself, on free ports,
// with the embedded store in a temporary directory.
type own struct {
	dir         string
	gateway     string // base URL
	crm         string // base URL
	gw, crmProc *proc.Process
}

// ownCaddyfile: gateway port, rules file, CRM port. The store is the
// embedded one in its default directory, under Caddy's data directory,
// which the gateway's environment points at the demo's temporary
// directory (XDG_DATA_HOME).
const ownCaddyfile = `{
	admin off
	persist_config off
	default_bind 127.0.0.1
}

http://127.0.0.1:%d {
	idempotency {
		rules %s
		store embedded
	}
	reverse_proxy 127.0.0.1:%d
}
`

func startOwn(client *http.Client, idemgate, crmBin, rules string) (o *own, err error) {
	rules, err = filepath.Abs(rules)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idemgate-demo-")
	if err != nil {
		return nil, err
	}
	o = &own{dir: dir}
	defer func() {
		if err != nil {
			o.stop()
		}
	}()
	gwPort, err := proc.FreePort()
	if err != nil {
		return o, err
	}
	crmPort, err := proc.FreePort()
	if err != nil {
		return o, err
	}
	o.gateway = fmt.Sprintf("http://127.0.0.1:%d", gwPort)
	o.crm = fmt.Sprintf("http://127.0.0.1:%d", crmPort)
	if o.crmProc, err = startChild("crm", dir, nil, crmBin, "-listen", fmt.Sprintf("127.0.0.1:%d", crmPort)); err != nil {
		return o, err
	}
	caddyfile := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(caddyfile, []byte(fmt.Sprintf(ownCaddyfile, gwPort, strconv.Quote(rules), crmPort)), 0o600); err != nil {
		return o, err
	}
	// CRM_URL: where the route's verify rule looks deals up.
	env := []string{"XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir, "CRM_URL=" + o.crm}
	if o.gw, err = startChild("gateway", dir, env, idemgate, "run", "--config", caddyfile, "--adapter", "caddyfile"); err != nil {
		return o, err
	}
	// Ready when the CRM answers through the gateway.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _, err := getStats(client, o.gateway)
		if err == nil {
			return o, nil
		}
		for _, c := range []*proc.Process{o.crmProc, o.gw} {
			if !c.Running() {
				return o, fmt.Errorf("the %s exited at start:\n%s", c.Name, c.Tail(15))
			}
		}
		if time.Now().After(deadline) {
			return o, fmt.Errorf("the gateway is not ready after 20s: %v\n%s", err, o.gw.Tail(15))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends both processes and removes the temporary directory.
func (o *own) stop() {
	for _, c := range []*proc.Process{o.gw, o.crmProc} {
		if c != nil {
			c.Stop()
		}
	}
	_ = os.RemoveAll(o.dir)
}

// startChild starts a helper process with its output in dir.
func startChild(name, dir string, env []string, bin string, args ...string) (*proc.Process, error) {
	p, err := proc.Start(name, proc.Options{LogDir: dir, Env: env}, bin, args...)
	if err != nil {
		return nil, fmt.Errorf("%w (run make build)", err)
	}
	return p, nil
}
