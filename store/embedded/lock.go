package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile is the file in DIR whose flock marks the owner; it holds the
// owner's pid.
const lockFile = "LOCK"

// ErrLocked is returned (wrapped, naming DIR and the owner's pid) by Open
// when another process owns DIR.
var ErrLocked = errors.New("store: the embedded store's directory is in use")

// openDirs are the directories this process has open: a second Open of
// one of them in the same process is refused (share the open Engine).
var (
	openMu   sync.Mutex
	openDirs = map[string]bool{}
)

// dirLock is the exclusive hold on DIR: an flock on DIR/LOCK, released by
// the kernel when the process dies (kill -9 leaves no stale lock).
type dirLock struct {
	dir string
	f   *os.File
}

// lockDir takes DIR for this process or says who has it.
func lockDir(dir string) (*dirLock, error) {
	openMu.Lock()
	defer openMu.Unlock()
	if openDirs[dir] {
		return nil, fmt.Errorf("%w: %s is already open in this process", ErrLocked, dir)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: embedded store: %w", err)
	}
	if err := flockOwn(f); err != nil {
		b, _ := os.ReadFile(f.Name())
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			owner := "unknown pid"
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				owner = "pid " + strconv.Itoa(pid)
			}
			return nil, fmt.Errorf("%w: %s is owned by another running gateway (%s); "+
				"one process owns an embedded store: stop the other one, give this one another directory, "+
				"or use Redis for several gateways", ErrLocked, dir, owner)
		}
		return nil, fmt.Errorf("store: embedded store: lock %s: %w", f.Name(), err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("store: embedded store: write %s: %w", f.Name(), err)
	}
	openDirs[dir] = true
	return &dirLock{dir: dir, f: f}, nil
}

// ownForkWait bounds how long lockDir waits for a lock held under this
// process's own pid: a child forked to run a program (os/exec) holds a
// copy of every descriptor between fork and exec, the lock's included,
// for microseconds to milliseconds.
const ownForkWait = 2 * time.Second

// flockOwn takes the flock on f. Held under this process's own pid (a
// store of this process closed it, and a child forked meanwhile still
// holds the copy), it retries until ownForkWait has passed: this process
// is no other running gateway.
func flockOwn(f *os.File) error {
	deadline := time.Now().Add(ownForkWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		b, _ := os.ReadFile(f.Name())
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr != nil || pid != os.Getpid() {
			return err
		}
		time.Sleep(wait)
	}
}

// unlock gives DIR up.
func (l *dirLock) unlock() error {
	openMu.Lock()
	defer openMu.Unlock()
	delete(openDirs, l.dir)
	return l.f.Close() // closing the last descriptor drops the flock
}
