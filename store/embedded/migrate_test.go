package embedded_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
)

// oldDir copies testdata/journal-v1, a DIR written by the journal engine
// of earlier versions, into a new directory.
func oldDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"journal-0000000000000001.log", "secret"} {
		b, err := os.ReadFile(filepath.Join("testdata", "journal-v1", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestImportsAnOldJournal: Open imports the live records of a DIR the
// journal engine wrote, once, keeps the old files aside, and keeps the
// secret (now checksummed).
func TestImportsAnOldJournal(t *testing.T) {
	t.Parallel()
	dir := oldDir(t)
	oldSecret, _ := os.ReadFile(filepath.Join(dir, "secret"))
	e, err := embedded.Open(embedded.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.Recovered().Imported; n != 5 {
		t.Fatalf("imported %d records, want the 5 live ones", n)
	}
	want := map[string]struct {
		state    store.State
		attempts int64
		body     string
	}{
		"completed-1": {store.StateCompleted, 3, `{"id":1}`},
		"inflight-2":  {store.StateInFlight, 1, ""},
		"unknown-3":   {store.StateUnknown, 1, ""},
		"released-4":  {store.StateReleased, 1, ""},
		"operator-5":  {store.StateCompleted, 1, "ok"},
	}
	check := func(e *embedded.Engine) {
		t.Helper()
		for id, w := range want {
			r, err := e.Get(ctx, id)
			if err != nil || r == nil || r.State != w.state || r.Attempts != w.attempts || string(r.Body) != w.body {
				t.Fatalf("%s after the import: %+v, %v; want %+v", id, r, err, w)
			}
		}
		if r, _ := e.Get(ctx, "operator-5"); len(r.Audit) != 1 || r.Audit[0].Actor != "ops" {
			t.Fatalf("operator-5's audit: %+v", r.Audit)
		}
		if r, err := e.Get(ctx, "expired-6"); r != nil || err != nil {
			t.Fatalf("an expired record was imported: %+v, %v", r, err)
		}
		if s, err := e.Secret(ctx); err != nil || !bytes.Equal(s, oldSecret) {
			t.Fatalf("the secret changed in the import (%v)", err)
		}
	}
	check(e)
	if r := mustClaim(t, e, claimReq("completed-1", "again")); r.Claimed {
		t.Fatal("an imported completed record executed again")
	}
	if _, err := os.Stat(filepath.Join(dir, "journal-imported", "journal-0000000000000001.log")); err != nil {
		t.Fatalf("the old journal is not kept aside: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "secret")); len(b) == len(oldSecret) {
		t.Fatal("the secret was not rewritten with its checksum")
	}
	want["completed-1"] = struct {
		state    store.State
		attempts int64
		body     string
	}{store.StateCompleted, 4, `{"id":1}`}
	e = open(t, dir)
	if n := e.Recovered().Imported; n != 0 {
		t.Fatalf("imported %d records again", n)
	}
	check(e)
}

// TestDamagedOldJournalIsRefused: a damaged byte in the middle of an old
// journal (good entries after it) refuses the import, naming the file,
// and leaves it in place.
func TestDamagedOldJournalIsRefused(t *testing.T) {
	t.Parallel()
	dir := oldDir(t)
	path := flip(t, dir, "journal-*.log", 0.3)
	_, err := embedded.Open(embedded.Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open of a damaged old journal: %v, want a refusal naming %s", err, path)
	}
	if _, serr := os.Stat(path); serr != nil {
		t.Fatalf("the damaged journal was moved: %v", serr)
	}
	t.Logf("refused: %v", err)
}
