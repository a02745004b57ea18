package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeWalkthrough runs the console blocks of the README's
// walkthrough (a create and its replay, a 422, a webhook keyed by its
// event id, and an outcome unknown released through the admin API) as
// written, in order, with bash, curl and jq, against the real binary on
// Caddyfile.example and a fresh example CRM, on both stores: only the
// addresses change. Every output line the README shows without an
// ellipsis must appear as it is (curl's CRLF read as LF), and every
// "field":value pair it shows must be in the answer.
func TestReadmeWalkthrough(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("IDEMGATE_REQUIRE_TOOLS") == "1" {
				t.Fatalf("%s is not installed (IDEMGATE_REQUIRE_TOOLS=1)", tool)
			}
			t.Skipf("%s is not installed (set IDEMGATE_REQUIRE_TOOLS=1 to fail instead)", tool)
		}
	}
	steps := readmeWalkthroughSteps(t)
	crmBin := filepath.Join(t.TempDir(), "crm")
	if out, err := exec.Command("go", "build", "-o", crmBin, "github.com/idemgate/idemgate/examples/crm").CombinedOutput(); err != nil {
		t.Fatalf("building the example CRM: %v\n%s", err, out)
	}
	rules, err := filepath.Abs(filepath.Join("..", "examples", "webhook", "routes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	forEachBackend(t, func(t *testing.T, be backend) {
		crmAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		crm := exec.Command(crmBin, "-listen", crmAddr)
		if err := crm.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = crm.Process.Kill(); _ = crm.Wait() })
		waitFor(t, func() bool { _, err := do(client, "GET", "http://"+crmAddr+"/stats", nil); return err == nil })
		gw := exampleGateway(t, be.store(t), crmAddr, rules, "CRM_URL=http://"+crmAddr)

		runWalkthrough(t, steps, strings.NewReplacer(
			"localhost:8080", strings.TrimPrefix(gw.url, "http://"),
			"localhost:2019", strings.TrimPrefix(gw.admin, "http://"),
			"localhost:9001", crmAddr,
		))
	})
}

// runWalkthrough runs the walkthrough's commands, with addresses
// replaced by addr, in order in one bash, and checks that each prints
// what the README shows: every output line it shows without an ellipsis
// as it is (curl's CRLF read as LF), every "field":value pair it shows.
func runWalkthrough(t *testing.T, steps []readmeStep, addr *strings.Replacer) {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -e -o pipefail\n")
	for i, s := range steps {
		fmt.Fprintf(&script, "echo '@@step %d'\n%s\n", i, addr.Replace(s.command))
	}
	out, err := exec.Command("bash", "-c", script.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("the README's commands failed: %v\n%s", err, out)
	}
	outputs := strings.Split(string(out), "@@step ")[1:]
	if len(outputs) != len(steps) {
		t.Fatalf("%d of %d commands ran:\n%s", len(outputs), len(steps), out)
	}
	for i, s := range steps {
		got := strings.ReplaceAll(strings.TrimPrefix(outputs[i], fmt.Sprintf("%d\n", i)), "\r", "")
		if !strings.HasSuffix(got, "\n") {
			got += "\n" // a body without a final newline, as curl prints it
		}
		for _, want := range s.output {
			if !strings.ContainsAny(want, "…") && !strings.Contains(want, "...") {
				if !strings.Contains("\n"+got, "\n"+want+"\n") {
					t.Errorf("$ %s\nprinted %q, the README shows %q", s.command, got, want)
				}
				continue
			}
			for _, pair := range readmePairs(want) {
				if !strings.Contains(got, pair) {
					t.Errorf("$ %s\nprinted %q, without the README's %s", s.command, got, pair)
				}
			}
		}
	}
}

// readmeStep is one command of a README console block and what the
// README shows it printing.
type readmeStep struct {
	command string
	output  []string
}

// readmeWalkthroughSteps reads the console blocks of the README's
// "Walkthrough" section (its subsections included), in order. The
// section must show at least one command whose output it shows, and the
// operator's release through the admin API.
func readmeWalkthroughSteps(t *testing.T) []readmeStep {
	t.Helper()
	section := readmeSection(t, "Walkthrough")
	var steps []readmeStep
	shown, release := false, false
	for _, block := range strings.Split(section, "```console\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		cont := false
		for _, line := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
			switch {
			case cont:
				steps[len(steps)-1].command += "\n" + line
			case strings.HasPrefix(line, "$ "):
				steps = append(steps, readmeStep{command: strings.TrimPrefix(line, "$ ")})
				release = release || strings.Contains(line, "/release")
			case len(steps) > 0:
				steps[len(steps)-1].output = append(steps[len(steps)-1].output, line)
				shown = shown || line != ""
			}
			cont = strings.HasSuffix(line, "\\")
		}
	}
	if !shown || !release {
		t.Fatalf("the README's walkthrough has %d commands; want some with their output and a release through the admin API", len(steps))
	}
	return steps
}

// readmeSection returns the README's "## heading" section, its
// subsections included.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", "## "+heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// readmePairs returns the "field":"text" and "field":number pairs of a
// line the README abbreviates, leaving out values it cut short.
func readmePairs(line string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`"[a-z_]+":("[^"]*"|[0-9]+)`).FindAllString(line, -1) {
		if !strings.Contains(m, "…") && !strings.Contains(m, "...") {
			out = append(out, m)
		}
	}
	return out
}

// TestReadmeMinimalSetup runs the gateway on the README's minimal
// Caddyfile and routes.yaml as written, on both stores, with only the
// addresses (and the store's) replaced: the header-key route refuses a
// create without a key and replays one with it, and the webhook route
// keys a delivery by its event id, whatever its delivery_attempt.
func TestReadmeMinimalSetup(t *testing.T) {
	t.Parallel()
	section := readmeSection(t, "A minimal setup")
	block := func(lang string) string {
		_, rest, ok := strings.Cut(section, "```"+lang+"\n")
		if !ok {
			t.Fatalf("the README's minimal setup has no %s block", lang)
		}
		body, _, _ := strings.Cut(rest, "```")
		return body
	}
	caddyfile, rules := block("caddyfile"), block("yaml")
	forEachBackend(t, func(t *testing.T, be backend) {
		up := newUpstream(t)
		g := newGateway(t)
		g.env = []string{"CRM_URL=http://" + up.addr(), "CRM_TOKEN=readme-token"}
		store := be.store(t)
		if store == "embedded" {
			store = "embedded " + filepath.Join(g.dir, "store")
		}
		cf := fmt.Sprintf("{\n\tadmin 127.0.0.1:%d\n\tpersist_config off\n\tdefault_bind 127.0.0.1\n}\n\n", g.adminPort) + caddyfile
		for _, r := range [][2]string{
			{":8080 {", fmt.Sprintf(":%d {", g.port)},
			{"store embedded #", "store " + store + " #"},
			{"reverse_proxy 127.0.0.1:9001", "reverse_proxy " + up.addr()},
		} {
			if n := strings.Count(cf, r[0]); n != 1 {
				t.Fatalf("the README's minimal Caddyfile has %q %d times, want once", r[0], n)
			}
			cf = strings.Replace(cf, r[0], r[1], 1)
		}
		for name, text := range map[string]string{"Caddyfile": cf, "routes.yaml": rules} {
			if err := os.WriteFile(filepath.Join(g.dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		g.start()
		t.Cleanup(g.stop)

		order := []byte(`{"sku":"A-1","qty":2}`)
		if r := send(t, "POST", g.url+"/orders", order, "Content-Type", "application/json"); !isProblem(t, r, 400, "key-missing", "") {
			t.Errorf("POST /orders without a key: %d %s, want 400 key-missing", r.status, r.body)
		}
		for i := range 2 {
			r := send(t, "POST", g.url+"/orders", order, "Content-Type", "application/json", "Idempotency-Key", "order-7")
			if r.status != 201 || (i == 1) != (r.header.Get("Idempotent-Replayed") == "true") {
				t.Errorf("POST /orders with a key, delivery %d: %d, Idempotent-Replayed %q", i+1, r.status, r.header.Get("Idempotent-Replayed"))
			}
		}
		for i := range 3 {
			body := fmt.Sprintf(`{"id":"evt_184","type":"deal.create","delivery_attempt":%d}`, i+1)
			r := send(t, "POST", g.url+"/crm/deals", []byte(body), "Content-Type", "application/json")
			if r.status != 201 || (i > 0) != (r.header.Get("Idempotent-Replayed") == "true") {
				t.Errorf("webhook delivery %d: %d, Idempotent-Replayed %q", i+1, r.status, r.header.Get("Idempotent-Replayed"))
			}
		}
		if n, m := up.count("/orders"), up.count("/crm/deals"); n != 1 || m != 1 {
			t.Errorf("the upstream got %d orders and %d deals, want 1 and 1", n, m)
		}
	})
}
