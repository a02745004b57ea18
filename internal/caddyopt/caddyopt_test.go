package caddyopt

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want caddy.Duration
		err  string
	}{
		{"op_timeout 2s", caddy.Duration(2 * time.Second), ""},
		{"op_timeout 1d", caddy.Duration(24 * time.Hour), ""},
		{"op_timeout soon", 0, `op_timeout: "soon" is not a positive duration`},
		{"op_timeout 0s", 0, `op_timeout: "0s" is not a positive duration`},
		{"op_timeout", 0, "wrong argument count"},
		{"op_timeout 1s 2s", 0, "wrong argument count"},
	} {
		d := caddyfile.NewTestDispenser(tc.in)
		d.Next()
		got, err := Duration(d)
		if tc.err == "" && (err != nil || got != tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: %v, %v; want %v, error %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}
