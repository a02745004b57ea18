// Package caddyopt reads the Caddyfile option values that the record store
// modules share.
package caddyopt

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// Duration reads the current option's one argument, a positive duration
// such as `2s`; the error names the option and the value.
func Duration(d *caddyfile.Dispenser) (caddy.Duration, error) {
	opt := d.Val()
	var s string
	if !d.AllArgs(&s) {
		return 0, d.ArgErr()
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil || dur <= 0 {
		return 0, d.Errf("%s: %q is not a positive duration", opt, s)
	}
	return caddy.Duration(dur), nil
}
