package drill

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// The drill tests run the real binary: $IDEMGATE_BIN (make build), or a
// build of ./cmd/idemgate made once for the run, and the example CRM,
// built once for the run when a test first needs them.
var (
	binDir             string
	buildOnce          sync.Once
	gatewayBin, crmBin string
	buildErr           error
)

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "idemgate-drill-test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		return m.Run()
	}()
	os.Exit(code)
}

// binaries builds what the drill tests run, once.
func binaries(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		crmBin = filepath.Join(binDir, "crm")
		gatewayBin = os.Getenv("IDEMGATE_BIN")
		builds := [][]string{{"-o", crmBin, "github.com/idemgate/idemgate/examples/crm"}}
		if gatewayBin == "" {
			gatewayBin = filepath.Join(binDir, "idemgate")
			builds = append(builds, []string{"-tags", "nobadger,nomysql,nopgx", "-o", gatewayBin, "github.com/idemgate/idemgate/cmd/idemgate"})
		}
		for _, args := range builds {
			out, err := exec.Command("go", append([]string{"build"}, args...)...).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("building for the drill tests: %v\n%s", err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// startCRM starts the example CRM on a free loopback port and returns its
// base URL.
func startCRM(t *testing.T) string {
	t.Helper()
	binaries(t)
	cmd := exec.Command(crmBin, "-listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := regexp.MustCompile(`listening on (http://[0-9.:]+)`).FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case u := <-found:
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("the example CRM did not say where it listens")
		return ""
	}
}

// exampleDir is examples/drill, which the drill files of the tests use.
func exampleDir(t *testing.T) string {
	d, err := filepath.Abs("../examples/drill")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// drillRun runs `idemgate drill -yes -json` on the drill file text,
// with CRM_URL set, and returns its exit status, its output and report.
func drillRun(t *testing.T, crm, text string) (int, string, *Report) {
	t.Helper()
	binaries(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "drill.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "report.json")
	cmd := exec.Command(gatewayBin, "drill", "-yes", "-json", out, file)
	cmd.Env = append(os.Environ(), "CRM_URL="+crm)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if b, err := os.ReadFile(out); err == nil {
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("the JSON report: %v", err)
		}
	}
	return code, stdout.String() + stderr.String(), &rep
}

// exampleDrill is examples/drill/drill.yaml with its rules file's path
// made absolute, and extra lines appended.
func exampleDrill(t *testing.T, extra string) string {
	b, err := os.ReadFile(filepath.Join(exampleDir(t), "drill.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "rules: routes.yaml", "rules: "+filepath.Join(exampleDir(t), "routes.yaml"), 1)
	return text + extra
}

// TestDrillExampleCRM: the drill of examples/drill passes every scenario
// against the example CRM, on the embedded store and on Redis.
func TestDrillExampleCRM(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"embedded", func(*testing.T) string { return "" }},
		{"redis", func(t *testing.T) string { return "redis: redis://" + redistest.Start(t).Addr + "/0\n" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, rep := drillRun(t, startCRM(t), exampleDrill(t, tc.store(t)))
			if code != ExitHeld {
				t.Fatalf("exit status %d, want 0:\n%s", code, out)
			}
			if len(rep.Results) != len(scenarioNames) {
				t.Fatalf("%d scenarios in the report, want %d", len(rep.Results), len(scenarioNames))
			}
			want := map[string]int{"invalid_field": 0}
			for _, r := range rep.Results {
				n, ok := want[r.Name]
				if !ok {
					n = 1
				}
				if r.Verdict != Held || r.Records == nil || *r.Records != n || r.UpstreamCalls != 1 {
					t.Errorf("%s: verdict %s, records %v (want %d), upstream calls %d (want 1)", r.Name, r.Verdict, r.Observed(), n, r.UpstreamCalls)
				}
			}
			if !strings.Contains(out, "9 of 9 scenarios held") {
				t.Errorf("the terminal report lacks the summary:\n%s", out)
			}
			t.Logf("the terminal report:\n%s", out)
		})
	}
}

// TestDrillCatchesBrokenSetups: the drill fails, with the observed counts
// and exit status 1, where the setup does not hold the guarantee.
func TestDrillCatchesBrokenSetups(t *testing.T) {
	t.Parallel()
	// liar is a count endpoint that never finds anything.
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, "[]")
	}))
	t.Cleanup(liar.Close)
	for _, tc := range []struct {
		name, rules, extra, scenario string
		records                      int
		why                          string
	}{
		{
			name: "release without verify", scenario: "lost_answer", records: 2,
			rules: "defaults: { lock_lease: 3s }\nroutes:\n  - name: create_crm_deal\n    match: { path: /crm/deals }\n" +
				"    key: [\"{header.Idempotency-Key}\"]\n    on_unknown_outcome: release\n",
			why: "2 records, expected 1 record, never 2",
		},
		{
			name: "route list that does not match", scenario: "parallel", records: 5, extra: "parallel: 5\n",
			rules: "routes:\n  - name: create_crm_deal\n    match: { path: /crm/other }\n    key: [\"{header.Idempotency-Key}\"]\n",
			why:   "5 of 5 answers came from the upstream's execution, expected 1",
		},
		{
			name: "count endpoint that lies", scenario: "double_delivery", records: 0,
			extra: "count: { url: \"" + liar.URL + "/?k={key}\", path: \"#\" }\n",
			why:   "the count request says 0 records, but the upstream answered 2xx once",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			text := exampleDrill(t, "scenarios: ["+tc.scenario+"]\n"+tc.extra)
			if tc.rules != "" {
				rules := filepath.Join(t.TempDir(), "routes.yaml")
				if err := os.WriteFile(rules, []byte(tc.rules), 0o600); err != nil {
					t.Fatal(err)
				}
				text = regexp.MustCompile(`(?m)^rules: .*$`).ReplaceAllString(text, "rules: "+rules)
			}
			if tc.extra != "" && strings.HasPrefix(tc.extra, "count:") {
				text = regexp.MustCompile(`(?ms)^count:\n.*?\n\n`).ReplaceAllString(text, "")
			}
			code, out, rep := drillRun(t, startCRM(t), text)
			if code != ExitFailed {
				t.Fatalf("exit status %d, want 1:\n%s", code, out)
			}
			if len(rep.Results) != 1 {
				t.Fatalf("%d scenarios in the report, want 1:\n%s", len(rep.Results), out)
			}
			r := rep.Results[0]
			if r.Verdict != Failed || r.Records == nil || *r.Records != tc.records {
				t.Errorf("verdict %s with %s records, want FAILED with %d", r.Verdict, r.Observed(), tc.records)
			}
			if !strings.Contains(out, tc.why) || !strings.Contains(out, "0 of 1 scenarios held, 1 FAILED") {
				t.Errorf("the terminal report does not say %q:\n%s", tc.why, out)
			}
			t.Logf("the terminal report:\n%s", out)
		})
	}
}

// TestDrillBadFileExit: a drill file with a mistake is refused before
// anything runs, naming file, line and field, with exit status 2.
func TestDrillBadFileExit(t *testing.T) {
	t.Parallel()
	code, out, _ := drillRun(t, "http://127.0.0.1:1", "upstream: http://127.0.0.1:1\nrules: r.yaml\nroute: x\nrequest:\n  path: crm\n")
	if code != ExitCannot || !regexp.MustCompile(`drill\.yaml:5: request\.path: is required and starts with /`).MatchString(out) {
		t.Errorf("exit status %d, output:\n%s", code, out)
	}
}

// TestDrillTwiceOnOneRedis: a second drill on the Redis of a first (each
// run with a secret of its own) runs under a key prefix of its own, so
// the store's check of the secret does not refuse it, and holds.
func TestDrillTwiceOnOneRedis(t *testing.T) {
	t.Parallel()
	store := "redis: redis://" + redistest.Start(t).Addr + "/0\nscenarios: [parallel]\n"
	crm := startCRM(t)
	for run := range 2 {
		code, out, rep := drillRun(t, crm, exampleDrill(t, store))
		if code != ExitHeld || len(rep.Results) != 1 || rep.Results[0].Verdict != Held {
			t.Fatalf("run %d: exit status %d, want 0:\n%s", run+1, code, out)
		}
	}
}
