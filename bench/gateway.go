package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/internal/proc"
)

// gatewayProc is one bin/idemgate process with the four sites of
// caddyfileTemplate, each on a port of its own.
type gatewayProc struct {
	*proc.Process
	admin string            // host:port of the admin endpoint
	sites map[string]string // site → host:port
}

// startGateway runs the gateway binary in a directory of its own (its
// Caddy data directory, and so the embedded store's, is in there too),
// on the CPUs in cpus when not "" (taskset -c), with the Redis site on
// redisStore ("redis://…" or "embedded"). It returns once every site
// answers.
func (e *env) startGateway(o options, name, cpus, redisStore string) (*gatewayProc, error) {
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports := make([]int, 5)
	for i := range ports {
		p, err := proc.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	g := &gatewayProc{admin: addr(ports[0]), sites: map[string]string{
		sitePlain: addr(ports[1]), siteRedis: addr(ports[2]), siteEmbedded: addr(ports[3]), siteStatic: addr(ports[4]),
	}}
	logLevel := ""
	if o.quiet {
		logLevel = "log {\n\t\tlevel WARN\n\t}"
	}
	caddyfile := fmt.Sprintf(caddyfileTemplate, g.admin, logLevel,
		ports[1], e.up.addr,
		ports[2], redisStore, e.up.addr,
		ports[3], e.up.addr,
		ports[4], strconv.Quote(staticBody))
	if e.pg != nil {
		p, err := proc.FreePort()
		if err != nil {
			return nil, err
		}
		g.sites[sitePostgres] = addr(p)
		store := e.pg.store()
		if o.pgPool > 0 {
			// pgx reads the pool's size from the URL.
			store += fmt.Sprintf("&pool_max_conns=%d", o.pgPool)
		}
		caddyfile += fmt.Sprintf(postgresSiteTemplate, p, store, e.up.addr)
	}
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(caddyfile), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "routes.yaml"), []byte(routesYAML), 0o644); err != nil {
		return nil, err
	}
	bin, err := filepath.Abs(o.gateway)
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--config", "Caddyfile", "--adapter", "caddyfile"}
	if cpus != "" {
		args = append([]string{"-c", cpus, bin}, args...)
		bin = "taskset"
	}
	env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
	if o.gatewayProcs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(o.gatewayProcs))
	}
	g.Process, err = startChild(name, dir, env, bin, args...)
	if err != nil {
		return nil, err
	}
	err = waitFor(g.Process, 30*time.Second, func() error {
		urls := []string{"http://" + g.admin + "/config/"}
		for _, a := range g.sites {
			urls = append(urls, "http://"+a+"/")
		}
		for _, url := range urls {
			if err := httpReady(url)(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		g.Stop()
		return nil, err
	}
	return g, nil
}

// caddyfileTemplate: admin, log options; plain port, upstream; Redis
// gateway port, store, upstream; embedded gateway port, upstream; static
// port, body. The embedded store is in its default directory, under
// Caddy's data directory (XDG_DATA_HOME: the process's own directory).
// Every reverse_proxy has the same transport, with idle connections
// enough for every load connection (Caddy's default of 32 idle
// connections per host makes reverse_proxy open and close upstream
// connections all the time at 64), so the ratios compare the gateway,
// not connection churn.
const caddyfileTemplate = `{
	admin %s
	persist_config off
	auto_https off
	default_bind 127.0.0.1
	%s
}

:%d {
	reverse_proxy %s {
		transport http {
			keepalive_idle_conns_per_host 1024
		}
	}
}

:%d {
	idempotency {
		rules routes.yaml
		store %s
	}
	reverse_proxy %s {
		transport http {
			keepalive_idle_conns_per_host 1024
		}
	}
}

:%d {
	idempotency {
		rules routes.yaml
		store embedded
	}
	reverse_proxy %s {
		transport http {
			keepalive_idle_conns_per_host 1024
		}
	}
}

:%d {
	header Content-Type application/json
	respond %s 201
}
`

// routesYAML guards POST /v1/deals by its Idempotency-Key header (scope:
// the Authorization header, the default); /v1/notes matches no route;
// duplicates of POST /v1/slow (a slow call) wait for the first.
const routesYAML = `routes:
  - name: create_deal
    match: { methods: [POST], path: /v1/deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
  - name: slow_deal
    match: { methods: [POST], path: /v1/slow }
    key: ["{header.Idempotency-Key}"]
    on_in_flight: wait
    in_flight_wait: 10s
`

// staticBody is what the respond site answers: a deal like the upstream's.
const staticBody = `{"id":"D-1",` + dealPad + `D-1"},"status":"created"}`
