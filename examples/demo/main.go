// Command demo delivers one webhook event three times through the gateway,
// the way a provider that timed out and retried would (two of the
// deliveries race each other), then asks the CRM how many deals the event
// created. In its second act the CRM creates a deal and drops the
// connection; the provider's retry gets that same deal, which the gateway
// looked up by the event's key (the route's verify rule).
//
// It uses the gateway of a running `make run` when there is one on :8080
// (a Caddy in front of the example CRM whose admin API shows the
// idempotency handler on that port), and otherwise starts a gateway and a
// CRM of its own on free ports, with the embedded store in a temporary
// directory, and stops them at the end. It never starts a second gateway
// on a port another one holds: Caddy listens with SO_REUSEPORT, so both
// would bind and each would let one delivery through.
//
// `demo -check-ports ADDR,...` only checks that the addresses are free
// (`make run` runs it before starting) and exits 1 naming the first that
// is taken.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	gateway := flag.String("gateway", "http://127.0.0.1:8080", "the `make run` gateway to use when it is running")
	admin := flag.String("admin", "http://localhost:2019", "that gateway's admin API")
	crm := flag.String("crm", "http://127.0.0.1:9001", "that gateway's CRM (for /stats)")
	idemgate := flag.String("idemgate", "bin/idemgate", "gateway binary, to start one of its own")
	crmBin := flag.String("crm-bin", "bin/crm", "CRM binary, to start one of its own")
	rules := flag.String("rules", "examples/webhook/routes.yaml", "route rules of its own gateway")
	event := flag.String("event", fmt.Sprintf("evt_%d", time.Now().UnixNano()%1000000), "webhook event id")
	checkPorts := flag.String("check-ports", "", "only check that these comma-separated addresses are free, then exit")
	who := flag.String("who", "make run", "with -check-ports: who is asking, for the message")
	flag.Parse()

	if *checkPorts != "" {
		if err := checkFree(splitList(*checkPorts)); err != nil {
			fmt.Fprintln(os.Stderr, checkPortsMessage(*who, err))
			os.Exit(1)
		}
		return
	}
	client := &http.Client{Timeout: 15 * time.Second}
	gw, crmURL := *gateway, *crm
	if ok, why := probeRunning(client, gw, *admin, crmURL); ok {
		fmt.Printf("using the running `make run` gateway on %s (its admin API, %s, shows the idempotency handler in front of the example CRM on %s)\n", gw, *admin, crmURL)
	} else {
		fmt.Printf("no `make run` gateway: %s.\nstarting a gateway (embedded store in a temporary directory) and a CRM of its own on free ports\n", why)
		o, err := startOwn(client, *idemgate, *crmBin, *rules)
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		stopOnSignal(o)
		gw, crmURL = o.gateway, o.crm
		fmt.Printf("gateway %s, CRM %s\n", gw, crmURL)
	}
	if err := run(client, gw, crmURL, *event); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		exit(1)
	}
	if err := actTwo(client, gw, crmURL, *event+"_dropped"); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		exit(1)
	}
	exit(0)
}

// cleanups run once before the demo exits: they stop its own processes.
var (
	cleanups    []func()
	cleanupOnce sync.Once
)

func exit(code int) {
	cleanupOnce.Do(func() {
		for _, f := range cleanups {
			f()
		}
	})
	os.Exit(code)
}

// stopOnSignal stops the demo's own processes on Ctrl-C.
func stopOnSignal(o *own) {
	cleanups = append(cleanups, o.stop)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		exit(130)
	}()
}
