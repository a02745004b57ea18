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

		var script strings.Builder
		script.WriteString("set -e -o pipefail\n")
		for i, s := range steps {
			cmd := strings.NewReplacer(
				"localhost:8080", strings.TrimPrefix(gw.url, "http://"),
				"localhost:2019", strings.TrimPrefix(gw.admin, "http://"),
				"localhost:9001", crmAddr,
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
	})
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
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Walkthrough\n")
	if !ok {
		t.Fatal(`README.md has no "## Walkthrough" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
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
