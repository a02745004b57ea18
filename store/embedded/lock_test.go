package embedded

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLockWaitsForOwnForkedChild: a child this process forks (os/exec,
// between fork and exec) holds a copy of every descriptor, the lock's
// included, so DIR/LOCK can be held under this process's own pid after
// the store that held it closed. lockDir waits for that hold to go
// rather than report this process as another running gateway.
func TestLockWaitsForOwnForkedChild(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strconv.Itoa(os.Getpid()) + "\n"); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = f.Close() // the child execs: its copy of the descriptor goes
		close(released)
	}()
	l, err := lockDir(dir)
	if err != nil {
		t.Fatalf("lockDir while this process's own forked copy held the lock: %v", err)
	}
	<-released
	if err := l.unlock(); err != nil {
		t.Fatal(err)
	}
}
