package proc

import (
	"strings"
	"testing"
	"time"
)

// TestStartStopTail: a child's output lands in its log, Stop ends it
// (SIGTERM), and Tail shows the last lines.
func TestStartStopTail(t *testing.T) {
	p, err := Start("shell", Options{LogDir: t.TempDir()}, "sh", "-c", "for i in 1 2 3 4 5; do echo line $i; done; exec sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(p.Tail(2), "line 5"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("log tail %q, want the last two lines", p.Tail(2))
		}
	}
	if got := p.Tail(2); got != "line 4\nline 5" || !p.Running() || p.Pid() <= 0 {
		t.Fatalf("tail %q, running %v, pid %d", got, p.Running(), p.Pid())
	}
	p.Stop()
	if p.Running() {
		t.Fatal("still running after Stop")
	}
	if _, err := Start("missing", Options{LogDir: t.TempDir()}, "/nonexistent/binary"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("starting a missing binary: %v", err)
	}
}

// TestFreePortOutsideEphemeralRange: the ports FreePort hands out lie below
// the kernel's ephemeral range, so that no outgoing connection (whose
// source port the kernel takes from that range) can hold one between the
// probe and the bind of the server it is meant for; and no port is handed
// out twice in one process.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	lo, _, ok := ephemeralRange()
	if !ok {
		t.Skip("no /proc/sys/net/ipv4/ip_local_port_range on this system")
	}
	seen := map[int]bool{}
	for range 200 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p >= lo || p < 1024 {
			t.Fatalf("FreePort() = %d, inside the ephemeral range starting at %d or privileged", p, lo)
		}
		if seen[p] {
			t.Fatalf("FreePort() handed out %d twice", p)
		}
		seen[p] = true
	}
}
