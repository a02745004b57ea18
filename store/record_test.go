package store

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   http.Header
		wire string
		out  http.Header // nil: same as in
	}{
		{"empty", http.Header{}, "", http.Header{}},
		{"nil", nil, "", http.Header{}},
		{"sorted names, values in order",
			http.Header{"Set-Cookie": {"b=2", "a=1"}, "Content-Type": {"text/html"}},
			"Content-Type: text/html\r\nSet-Cookie: b=2\r\nSet-Cookie: a=1\r\n", nil},
		{"colon and spaces inside values",
			http.Header{"Location": {"http://x:8080/a"}, "X-Pad": {" lead", "trail "}, "X-Empty": {""}},
			"Location: http://x:8080/a\r\nX-Empty: \r\nX-Pad:  lead\r\nX-Pad: trail \r\n", nil},
		{"non-canonical names kept",
			http.Header{"x-lower": {"1"}},
			"x-lower: 1\r\n", nil},
		{"CR and LF in values become spaces",
			http.Header{"X-Bad": {"a\r\nInjected: yes", "b\nc"}},
			"X-Bad: a  Injected: yes\r\nX-Bad: b c\r\n",
			http.Header{"X-Bad": {"a  Injected: yes", "b c"}}},
		{"names that cannot be written are dropped",
			http.Header{"": {"x"}, "A:B": {"x"}, "A\r\nB": {"x"}, "Ok": {"y"}},
			"Ok: y\r\n",
			http.Header{"Ok": {"y"}}},
		{"non-UTF-8 value bytes", http.Header{"X-Bin": {"\xff\xfe\x80"}}, "X-Bin: \xff\xfe\x80\r\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wire := encodeHeader(tc.in)
			if wire != tc.wire {
				t.Fatalf("encodeHeader = %q, want %q", wire, tc.wire)
			}
			want := tc.out
			if want == nil {
				want = tc.in
			}
			if got := decodeHeader(wire); !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeHeader = %#v, want %#v", got, want)
			}
		})
	}
}

func TestDecodeHeaderTolerance(t *testing.T) {
	got := decodeHeader("A: 1\r\nno colon\r\n: empty name\r\nB:2\r\nA: 3")
	want := http.Header{"A": {"1", "3"}, "B": {"2"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}

func TestDecodeRecord(t *testing.T) {
	full := []any{
		"completed", "tok", "r", "op", "fp", "rule", "1700000000123", "1700000001456", "1700000030123",
		"3", "2", "201", "Content-Type: a/b\r\n", "\x00body\xff", "0", "dg", "eid", "",
		`{"at":1700000002000,"actor":"alice","action":"complete","reason":"seen in the CRM"}`,
		"GET http://crm/deals?k=1", "2000", "1700000002000 200 not_applied\nbad line\n1700000003000 0 error", "2",
		"1700000013000", "1", "1700000002000", "ctok", "1700000005000",
	}
	r, err := decodeRecord("id1", full)
	if err != nil {
		t.Fatal(err)
	}
	want := &Record{
		ID: "id1", State: StateCompleted, Token: "tok", Route: "r", Operation: "op", Fingerprint: "fp",
		FingerprintRule: "rule", StartedAt: time.UnixMilli(1700000000123), CompletedAt: time.UnixMilli(1700000001456),
		LeaseUntil: time.UnixMilli(1700000030123), Attempts: 3, Executions: 2, Status: 201,
		Header: http.Header{"Content-Type": {"a/b"}}, Body: []byte("\x00body\xff"), Digest: "dg", ExternalID: "eid",
		Audit: []AuditEntry{{At: time.UnixMilli(1700000002000), Actor: "alice", Action: "complete", Reason: "seen in the CRM"}},
		Check: Check{Method: "GET", URL: "http://crm/deals?k=1", After: 2 * time.Second},
		Checks: []CheckEntry{
			{At: time.UnixMilli(1700000002000), Status: 200, Verdict: VerdictNotApplied},
			{At: time.UnixMilli(1700000003000), Status: 0, Verdict: VerdictError},
		},
		CheckCount: 2, NextCheck: time.UnixMilli(1700000013000), NotFoundStreak: 1,
		CheckLeaseUntil: time.UnixMilli(1700000005000),
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got  %+v\nwant %+v", r, want)
	}

	sparse := make([]any, numFields)
	sparse[iState] = "in_flight"
	r, err = decodeRecord("id2", sparse)
	if err != nil || r.State != StateInFlight || !r.StartedAt.IsZero() || r.Header != nil || r.Body != nil {
		t.Fatalf("sparse: %+v, %v", r, err)
	}

	for stored, state := range map[string]State{
		"in_flight": StateInFlight, "completed": StateCompleted, "unknown": StateUnknown, "released": StateReleased,
		"something_new": State("something_new"),
	} {
		sparse[iState] = stored
		if r, _ := decodeRecord("id", sparse); r.State != state {
			t.Errorf("stored %q decodes to %q, want %q", stored, r.State, state)
		}
	}

	if r, err := decodeRecord("absent", make([]any, numFields)); r != nil || err != nil {
		t.Fatalf("absent: %v, %v", r, err)
	}
	if _, err := decodeRecord("short", full[:5]); err == nil {
		t.Fatal("short reply: no error")
	}
	bad := append([]any(nil), full...)
	bad[iAttempts] = "many"
	if _, err := decodeRecord("bad", bad); err == nil || !strings.Contains(err.Error(), "att") {
		t.Fatalf("bad number: %v", err)
	}
}

func TestLuaFieldListMatchesFields(t *testing.T) {
	for i, f := range fields {
		if f == "" {
			t.Fatalf("field %d has no name", i)
		}
	}
	if want := "'st', 'tok', 'route', 'op', 'fp', 'fpr', 'sa', 'ca', 'lu', 'att', 'exe', 'sc', 'hd', 'bd', 'bo', 'dg', 'eid', 'rsn', 'aud', 'chk', 'cha', 'chl', 'chc', 'chn', 'chs', 'chf', 'clt', 'clu'"; luaConstants.Replace("$fields") != want {
		t.Fatalf("$fields = %s", luaConstants.Replace("$fields"))
	}
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
