package embedded_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
)

var ctx = context.Background()

func claimReq(id, token string) store.ClaimRequest {
	return store.ClaimRequest{
		ID: id, Route: "deals", Operation: "create_deal", Fingerprint: "fp", FingerprintRule: "whole-body",
		Token: token, Lease: 30 * time.Second, HoldTTL: time.Hour,
	}
}

func result(body string) store.Result {
	return store.Result{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(body), Digest: "d"}
}

func mustClaim(t testing.TB, e store.Engine, req store.ClaimRequest) store.ClaimResult {
	t.Helper()
	res, err := e.Claim(ctx, req)
	if err != nil {
		t.Fatalf("Claim %s: %v", req.ID, err)
	}
	return res
}

func mustComplete(t testing.TB, e store.Engine, id, token, body string, ttl time.Duration) {
	t.Helper()
	ok, err := e.Complete(ctx, store.CompleteRequest{Claim: claimReq(id, token), Result: result(body), TTL: ttl})
	if err != nil || !ok {
		t.Fatalf("Complete %s: %v, %v", id, ok, err)
	}
}

func id(i int) string { return fmt.Sprintf("%032x", i) }

// copyDir copies the files of a running engine's DIR: what a crash at
// this moment (kill -9, the page cache intact) leaves behind.
func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	err := filepath.WalkDir(from, func(path string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		switch {
		case rel == ".":
			return nil
		case de.IsDir():
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		case rel == "LOCK":
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
}

// TestRecordsSurviveACrash: every acknowledged change is in DIR's files
// the moment its call returns: a copy taken then (as a kill -9 would
// leave them) recovers completed records for replay, held and released
// ones with their history, and in-flight ones in flight with their lease,
// which then runs out as it would have.
func TestRecordsSurviveACrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := open(t, dir)
	mustClaim(t, e, claimReq(id(1), "A"))
	mustComplete(t, e, id(1), "A", `{"deal":1}`, time.Hour)
	mustClaim(t, e, claimReq(id(1), "B")) // a replay: attempts 2
	mustClaim(t, e, claimReq(id(2), "A"))
	if ok, err := e.MarkUnknown(ctx, id(2), "A", "upstream_5xx", time.Hour); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := e.OperatorRelease(ctx, id(2), store.Action{Actor: "ops", Reason: "no deal"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	short := claimReq(id(3), "A")
	short.Lease = 1500 * time.Millisecond
	flying := mustClaim(t, e, short).Record
	secret, err := e.Secret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*store.Record{}
	for i := 1; i <= 3; i++ {
		want[id(i)], _ = e.Get(ctx, id(i))
	}
	// The replay's attempt count is not waited for: Get saw it applied
	// (it waits for the record's lock), and the next synced write puts
	// it in the log file with everything written before it, so that a
	// copy taken now holds it.
	mustClaim(t, e, claimReq(id(4), "A"))

	crashed := open(t, copyDir(t, dir))
	for i := 1; i <= 3; i++ {
		got, err := crashed.Get(ctx, id(i))
		if err != nil || !reflect.DeepEqual(got, want[id(i)]) {
			t.Fatalf("record %d after the crash:\n got %+v, %v\nwant %+v", i, got, err, want[id(i)])
		}
	}
	if got, _ := crashed.Get(ctx, id(1)); got.Attempts != 2 {
		t.Fatalf("attempts %d, want 2", got.Attempts)
	}
	if again, err := crashed.Secret(ctx); err != nil || !bytes.Equal(again, secret) {
		t.Fatalf("the secret changed across the crash (%v)", err)
	}
	if r := mustClaim(t, crashed, claimReq(id(1), "C")); r.Claimed || r.Record.State != store.StateCompleted || string(r.Record.Body) != `{"deal":1}` {
		t.Fatalf("retry after the crash: %+v", r.Record)
	}
	if r := mustClaim(t, crashed, claimReq(id(3), "C")); r.Claimed || r.Record.State != store.StateInFlight || r.Record.Token != "A" {
		t.Fatalf("the dead process's claim, lease still running: %+v", r)
	}
	for crashed.Now().Before(flying.LeaseUntil.Add(time.Millisecond)) {
		time.Sleep(10 * time.Millisecond)
	}
	if r := mustClaim(t, crashed, claimReq(id(3), "D")); r.Claimed || r.Record.State != store.StateUnknown || r.Record.Reason != "lease_expired" {
		t.Fatalf("the dead process's claim after its lease: %+v", r)
	}
}

// TestCleanReopen: Close writes what is pending; Open finds it all.
func TestCleanReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := embedded.Open(embedded.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		mustClaim(t, e, claimReq(id(i), "A"))
		if i%2 == 0 {
			mustComplete(t, e, id(i), "A", strconv.Itoa(i), time.Hour)
		}
		mustClaim(t, e, claimReq(id(i), "B"))
	}
	if ok, err := e.Renew(ctx, id(1), "A", time.Hour); err != nil || !ok {
		t.Fatal(ok, err)
	}
	renewed, _ := e.Get(ctx, id(1))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Get(ctx, id(1)); err == nil {
		t.Fatal("Get after Close: no error")
	}
	e = open(t, dir)
	for i := range 100 {
		r, err := e.Get(ctx, id(i))
		if err != nil || r == nil || r.Attempts != 2 || (i%2 == 0) != (r.State == store.StateCompleted) {
			t.Fatalf("record %d: %+v, %v", i, r, err)
		}
	}
	if r, _ := e.Get(ctx, id(1)); !r.LeaseUntil.Equal(renewed.LeaseUntil) {
		t.Fatalf("lease %v, want the renewed %v", r.LeaseUntil, renewed.LeaseUntil)
	}
}

// TestOneOwner: a second Open of an open DIR in the same process fails
// and names DIR; after Close it succeeds.
func TestOneOwner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := embedded.Open(embedded.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Open(embedded.Options{Dir: dir}); !errors.Is(err, embedded.ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Open: %v, want ErrLocked naming %s", err, dir)
	}
	_ = e.Close()
	open(t, dir)
}

// TestHoldDir is not a test: TestOtherProcessOwnsDir runs the test binary
// with it to hold a DIR from another process.
func TestHoldDir(t *testing.T) {
	dir := os.Getenv("IDEMGATE_LOCAL_HOLD")
	if dir == "" {
		t.Skip("helper for TestOtherProcessOwnsDir")
	}
	if _, err := embedded.Open(embedded.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("holding")
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed
}

// TestOtherProcessOwnsDir: while another process owns DIR, Open fails
// with DIR and that process's pid; once it is killed with SIGKILL, Open
// succeeds at once (the kernel dropped the lock: nothing stale).
func TestOtherProcessOwnsDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldDir$", "-test.v")
	cmd.Env = append(os.Environ(), "IDEMGATE_LOCAL_HOLD="+dir)
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "holding" {
	}
	_, err := embedded.Open(embedded.Options{Dir: dir})
	want := fmt.Sprintf("pid %d", cmd.Process.Pid)
	if !errors.Is(err, embedded.ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open while another process holds DIR: %v; want ErrLocked naming %s and %s", err, dir, want)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	open(t, dir)
}

// dirSize is the bytes of DIR's files.
