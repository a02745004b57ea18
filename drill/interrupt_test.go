package drill

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// childPids are the processes whose parent is pid, from /proc.
func childPids(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, n)
		}
	}
	return kids
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// TestDrillInterrupted: SIGINT or SIGTERM to a running `idemgate drill`
// stops its gateway (no child process of it is left, and none is
// connected to the drill file's Redis) and its fault proxy, removes its
// temporary directory, prints what it had done and exits 130. Not
// parallel, its cases one after the other: the drills' fault proxies
// listen on ports the kernel picks, which a test that frees its own
// proxy's port (TestProxyDropAfterAnswer) must not see taken meanwhile.
func TestDrillInterrupted(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("child processes are found in /proc")
	}
	crm := startCRM(t)
	for _, tc := range []struct {
		sig   syscall.Signal
		redis bool
	}{{syscall.SIGINT, false}, {syscall.SIGTERM, false}, {syscall.SIGTERM, true}} {
		name := tc.sig.String()
		if tc.redis {
			name += " on Redis"
		}
		sig := tc.sig
		t.Run(name, func(t *testing.T) {
			binaries(t)
			var rds *redistest.Server
			extra := ""
			if tc.redis {
				rds = redistest.Start(t)
				extra = "redis: redis://" + rds.Addr + "/0\n"
			}
			dir, tmp := t.TempDir(), t.TempDir()
			file := filepath.Join(dir, "drill.yaml")
			if err := os.WriteFile(file, []byte(exampleDrill(t, extra)), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(gatewayBin, "drill", "-yes", file)
			cmd.Env = append(os.Environ(), "CRM_URL="+crm, "TMPDIR="+tmp)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			var mu sync.Mutex
			cmd.Stdout = &lockedWriter{mu: &mu, w: &out}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			// The drill runs its gateway once the first scenario starts.
			started := make(chan struct{})
			copied := make(chan struct{})
			go func() {
				defer close(copied)
				sc := bufio.NewScanner(stderr)
				sc.Split(bufio.ScanRunes)
				var once sync.Once
				for sc.Scan() {
					mu.Lock()
					out.WriteString(sc.Text())
					seen := strings.Contains(out.String(), "[2/")
					mu.Unlock()
					if seen {
						once.Do(func() { close(started) })
					}
				}
			}()
			select {
			case <-started:
			case <-time.After(60 * time.Second):
				t.Fatal("the drill did not start its second scenario in 60s")
			}
			kids := childPids(t, cmd.Process.Pid)
			if len(kids) == 0 {
				t.Fatal("the drill runs no gateway process")
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { <-copied; exited <- cmd.Wait() }()
			var werr error
			select {
			case werr = <-exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("the drill did not exit 30s after %v", sig)
			}
			code := 0
			var ee *exec.ExitError
			if errors.As(werr, &ee) {
				code = ee.ExitCode()
			}
			for _, pid := range kids {
				for deadline := time.Now().Add(5 * time.Second); alive(pid) && time.Now().Before(deadline); {
					time.Sleep(50 * time.Millisecond)
				}
				if alive(pid) {
					t.Errorf("the drill's child process %d still runs after %v", pid, sig)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if rds != nil {
				// Only this test's own connection is left.
				c := rds.Client(t)
				list, err := c.ClientList(context.Background()).Result()
				if n := strings.Count(strings.TrimSpace(list), "\n") + 1; err != nil || n != 1 {
					t.Errorf("Redis has %d client connections after the drill ended (%v), want only the test's:\n%s", n, err, list)
				}
			}
			left, _ := filepath.Glob(filepath.Join(tmp, "idemgate-drill-*"))
			mu.Lock()
			text := out.String()
			mu.Unlock()
			t.Logf("after %v: exit status %d, children %v, temporary files left %v; output:\n%s", sig, code, kids, left, text)
			if code != 130 {
				t.Errorf("exit status %d, want 130", code)
			}
			if len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
			if !strings.Contains(text, "interrupted") {
				t.Errorf("the drill does not say it was interrupted")
			}
		})
	}
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
