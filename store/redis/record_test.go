package redis

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// fullBlob is a stored record with every field set.
func fullBlob() *blob {
	b := &blob{state: stCompleted, attempts: 3, executions: 2, expires: 1700086400123,
		startedAt: 1700000000123, leaseUntil: 1700000030123}
	b.claim = [numClaimFields]string{
		cToken: "tok", cRoute: "r", cOperation: "op", cFingerprint: "fp", cFingerprintRule: "rule",
		cCheck: "GET http://crm/deals?k=1", cCheckAfter: "2000", cCheckCount: "2", cNextCheck: "1700000013000",
		cNotFoundStreak: "1", cNotFoundAt: "1700000002000", cCheckToken: "ctok", cCheckLeaseUntil: "1700000005000",
		cChecks: "1700000002000 200 not_applied\nbad line\n1700000003000 0 error",
		cAudit:  `{"at":1700000002000,"actor":"alice","action":"complete","reason":"seen in the CRM"}`,
	}
	b.result = &[numResultFields]string{
		rCompletedAt: "1700000001456", rStatus: "201", rBodyOmitted: "0", rDigest: "dg", rExternalID: "eid",
		rHeader: "Content-Type: a/b\r\n",
	}
	b.body = []byte("\x00body:\xff 12:")
	return b
}

func TestRecordBlobRoundTrip(t *testing.T) {
	stored := string(fullBlob().encode())
	r, wanted, err := decodeBlob("id1", stored, false)
	if err != nil || wanted != 0 {
		t.Fatal(wanted, err)
	}
	want := &store.Record{
		ID: "id1", State: store.StateCompleted, Token: "tok", Route: "r", Operation: "op", Fingerprint: "fp",
		FingerprintRule: "rule", StartedAt: time.UnixMilli(1700000000123), CompletedAt: time.UnixMilli(1700000001456),
		LeaseUntil: time.UnixMilli(1700000030123), Attempts: 3, Executions: 2, Result: store.Result{Status: 201,
			Header: http.Header{"Content-Type": {"a/b"}}, Body: []byte("\x00body:\xff 12:"), Digest: "dg", ExternalID: "eid"},
		Audit: []store.AuditEntry{{At: time.UnixMilli(1700000002000), Actor: "alice", Action: "complete", Reason: "seen in the CRM"}},
		Check: store.Check{Method: "GET", URL: "http://crm/deals?k=1", After: 2 * time.Second},
		Checks: []store.CheckEntry{
			{At: time.UnixMilli(1700000002000), Status: 200, Verdict: store.VerdictNotApplied},
			{At: time.UnixMilli(1700000003000), Status: 0, Verdict: store.VerdictError},
		},
		CheckCount: 2, NextCheck: time.UnixMilli(1700000013000), NotFoundStreak: 1,
		CheckLeaseUntil: time.UnixMilli(1700000005000),
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got  %+v\nwant %+v", r, want)
	}
	if got, want := stored[:blobClaimLen], "1c00000000030000000002170008640012317000000001231700000030123"; got != want {
		t.Fatalf("fixed header %q, want %q", got, want)
	}

	// A record in flight has no result part.
	sparse := &blob{state: stInFlight, attempts: 1, executions: 1, expires: 1}
	r, _, err = decodeBlob("id2", string(sparse.encode()), false)
	if err != nil || r.State != store.StateInFlight || !r.StartedAt.IsZero() || r.Header != nil || r.Body != nil || r.Status != 0 {
		t.Fatalf("sparse: %+v, %v", r, err)
	}
	for c, state := range map[byte]store.State{'f': store.StateInFlight, 'c': store.StateCompleted, 'u': store.StateUnknown, 'r': store.StateReleased} {
		sparse.state = c
		if r, _, _ := decodeBlob("id", string(sparse.encode()), false); r.State != state {
			t.Errorf("state byte %q decodes to %q, want %q", c, r.State, state)
		}
	}

	// A prefix holds the summary, or says how much does.
	r, wanted, err = decodeBlob("id1", stored[:len(stored)-5], true)
	if err != nil || wanted != 0 || r.Status != 201 || r.Digest != "dg" || r.Attempts != 3 {
		t.Fatalf("prefix into the body: %+v, %d, %v", r, wanted, err)
	}
	if r, wanted, err = decodeBlob("id1", stored[:90], true); r != nil || err != nil || wanted <= 90 {
		t.Fatalf("prefix into the claim part: %+v, %d, %v", r, wanted, err) // 90 < 71+claim length
	}

	for name, bad := range map[string]string{
		"short":          stored[:20],
		"another format": "2" + stored[1:],
		"state":          stored[:1] + "x" + stored[2:],
		"attempts":       stored[:2] + "many" + stored[6:],
		"cut":            stored[:len(stored)-5],
		"netstring":      stored[:blobHeader] + "x" + stored[blobHeader+1:],
	} {
		if _, _, err := decodeBlob("bad", bad, false); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// FuzzDecodeBlob: no input makes the decoder panic, and what a record
// built from the fuzzer's values holds comes back.
func FuzzDecodeBlob(f *testing.F) {
	f.Add(string(fullBlob().encode()), "tok", []byte("body"))
	f.Fuzz(func(t *testing.T, raw, field string, body []byte) {
		_, _, _ = decodeBlob("id", raw, false)
		_, _, _ = decodeBlob("id", raw, true)
		b := fullBlob()
		b.claim[cRoute], b.result[rExternalID], b.body = field, field, body
		r, _, err := decodeBlob("id", string(b.encode()), false)
		if err != nil || r.Route != field || r.ExternalID != field || string(r.Body) != string(body) {
			t.Fatalf("round trip: %+v, %v", r, err)
		}
	})
}

func TestMilliseconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Nanosecond: "1", time.Millisecond: "1", 1500 * time.Microsecond: "2", 30 * time.Second: "30000",
		720 * time.Hour: "2592000000",
	} {
		if got := ms(d); got != want {
			t.Errorf("ms(%v) = %s, want %s", d, got, want)
		}
	}
}

// TestScriptPlaceholdersAllReplaced: every $name in the script files
// stands for a constant the store defines.
func TestScriptPlaceholdersAllReplaced(t *testing.T) {
	files, err := luaFiles.ReadDir("scripts")
	if err != nil || len(files) == 0 {
		t.Fatalf("script files: %v (%d)", err, len(files))
	}
	for _, f := range files {
		src, err := luaFiles.ReadFile("scripts/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if out := luaConstants.Replace(string(src)); strings.Contains(out, "$") {
			i := strings.Index(out, "$")
			t.Errorf("%s: placeholder left at %q", f.Name(), out[i:min(i+30, len(out))])
		}
	}
}
