package e2e

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMakeRunTwice: `make run` answers the README's walkthrough as written
// the second time too. The example CRM keeps its deals in memory, so a
// store kept from the first run would replay the first run's answers to
// the second (a 201 where the CRM has no deal, a replayed 201 where the
// walkthrough expects the 500): every run gets a new store, printed at
// start and removed when it ends. It runs the real `make run` in the
// repository, on the README's own ports, and stops it as a user does
// (Ctrl-C: SIGINT to its process group); it skips when those ports are
// taken.
func TestMakeRunTwice(t *testing.T) {
	for _, tool := range []string{"make", "bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("IDEMGATE_REQUIRE_TOOLS") == "1" {
				t.Fatalf("%s is not installed (IDEMGATE_REQUIRE_TOOLS=1)", tool)
			}
			t.Skipf("%s is not installed (set IDEMGATE_REQUIRE_TOOLS=1 to fail instead)", tool)
		}
	}
	for _, addr := range []string{":8080", "127.0.0.1:9001", "127.0.0.1:2019", "127.0.0.1:8443"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("make run needs %s, which is taken: %v", addr, err)
		}
		ln.Close()
	}
	steps := readmeWalkthroughSteps(t)
	var stores []string
	for run := 1; run <= 2; run++ {
		out := &syncBuffer{}
		cmd := exec.Command("make", "-s", "run")
		cmd.Dir = ".."
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-exited
				t.Errorf("run %d: make run did not end 30s after Ctrl-C", run)
			}
		}
		ready := func() bool {
			for _, u := range []string{"http://localhost:2019/idempotency/records?limit=1", "http://127.0.0.1:9001/stats"} {
				r, err := do(client, "GET", u, nil)
				if err != nil || r.status != http.StatusOK {
					return false
				}
			}
			c, err := net.DialTimeout("tcp", "127.0.0.1:8080", time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		}
		for deadline := time.Now().Add(3 * time.Minute); !ready(); time.Sleep(200 * time.Millisecond) {
			select {
			case err := <-exited:
				t.Fatalf("run %d: make run ended: %v\n%s", run, err, out.String())
			default:
			}
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("run %d: make run is not ready after 3 minutes:\n%s", run, out.String())
			}
		}
		runWalkthrough(t, steps, strings.NewReplacer())
		stop()
		m := regexp.MustCompile(`store: embedded, new for this run, in (\S+)`).FindStringSubmatch(out.String())
		switch {
		case m == nil:
			t.Errorf("run %d: make run does not say where its store is", run)
		default:
			stores = append(stores, m[1])
			if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
				t.Errorf("run %d: its store %s is still there after the run ended (%v)", run, m[1], err)
			}
		}
		if t.Failed() {
			t.Logf("run %d: make run printed:\n%s", run, out.String())
			continue
		}
		t.Logf("run %d: the walkthrough answered as the README shows, on the store in %s", run, filepath.Base(m[1]))
	}
	if len(stores) == 2 && stores[0] == stores[1] {
		t.Errorf("both runs used the store in %s", stores[0])
	}
}
