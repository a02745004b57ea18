// Package tmpfs mounts small tmpfs file systems for tests that fill a
// disk: the embedded store's full-disk tests, in process and on the real
// binary.
package tmpfs

import (
	"bytes"
	"os/exec"
	"testing"
)

// Mount mounts a tmpfs of size (mount's syntax: "4m", "128m") on a new
// directory until the test ends, or skips the test when mounting is not
// permitted (it needs root or CAP_SYS_ADMIN).
func Mount(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
