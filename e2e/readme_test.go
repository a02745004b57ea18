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

// TestReadmeOperatorExample runs the README's admin API example as
// written, with bash, curl and jq, against the real binary on
// Caddyfile.example and the example CRM, on both stores: only the
// addresses change. Every output line the README shows without an
// ellipsis must appear as it is, and every "field":value pair it shows
// must be in the answer.
func TestReadmeOperatorExample(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("IDEMGATE_REQUIRE_TOOLS") == "1" {
				t.Fatalf("%s is not installed (IDEMGATE_REQUIRE_TOOLS=1)", tool)
			}
			t.Skipf("%s is not installed (set IDEMGATE_REQUIRE_TOOLS=1 to fail instead)", tool)
		}
	}
	steps := readmeOperatorSteps(t)
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

		var script strings.Builder
		script.WriteString("set -e -o pipefail\n")
		for i, s := range steps {
			cmd := strings.NewReplacer(
				"localhost:8080", strings.TrimPrefix(gw.url, "http://"),
				"localhost:2019", strings.TrimPrefix(gw.admin, "http://"),
			).Replace(s.command)
			fmt.Fprintf(&script, "echo '@@step %d'\n%s\n", i, cmd)
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
			got := strings.TrimPrefix(outputs[i], fmt.Sprintf("%d\n", i))
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
	})
}

// readmeStep is one command of a README console block and what the
// README shows it printing.
type readmeStep struct {
	command string
	output  []string
}

// readmeOperatorSteps reads the console block of the README's "Admin API"
// section that releases a record.
func readmeOperatorSteps(t *testing.T) []readmeStep {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Admin API\n")
	if !ok {
		t.Fatal(`README.md has no "### Admin API" section`)
	}
	section, _, _ = strings.Cut(section, "\n### ")
	for _, block := range strings.Split(section, "```console\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.Contains(block, "/release") {
			continue
		}
		var steps []readmeStep
		cont := false
		for _, line := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
			switch {
			case cont:
				steps[len(steps)-1].command += "\n" + line
			case strings.HasPrefix(line, "$ "):
				steps = append(steps, readmeStep{command: strings.TrimPrefix(line, "$ ")})
			case len(steps) > 0:
				steps[len(steps)-1].output = append(steps[len(steps)-1].output, line)
			}
			cont = strings.HasSuffix(line, "\\")
		}
		return steps
	}
	t.Fatal("the README's Admin API section has no console example that releases a record")
	return nil
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
