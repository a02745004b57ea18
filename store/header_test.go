package store

import (
	"net/http"
	"reflect"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   http.Header
		wire string
		out  http.Header // nil: same as in (none for an empty wire form)
	}{
		{"empty", http.Header{}, "", nil},
		{"nil", nil, "", nil},
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
			wire := EncodeHeader(tc.in)
			if wire != tc.wire {
				t.Fatalf("EncodeHeader = %q, want %q", wire, tc.wire)
			}
			if got := string(AppendHeader([]byte("prefix"), tc.in)); got != "prefix"+tc.wire {
				t.Fatalf("AppendHeader = %q, want %q", got, "prefix"+tc.wire)
			}
			want := tc.out
			if want == nil && tc.wire != "" {
				want = tc.in
			}
			if got := DecodeHeader(wire); !reflect.DeepEqual(got, want) {
				t.Fatalf("DecodeHeader = %#v, want %#v", got, want)
			}
		})
	}
}

func TestDecodeHeaderTolerance(t *testing.T) {
	got := DecodeHeader("A: 1\r\nno colon\r\n: empty name\r\nB:2\r\nA: 3")
	want := http.Header{"A": {"1", "3"}, "B": {"2"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}

func TestNewToken(t *testing.T) {
	a, b := NewToken(), NewToken()
	if len(a) != 32 || a == b {
		t.Fatalf("tokens %q %q", a, b)
	}
}
