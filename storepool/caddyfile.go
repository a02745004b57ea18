package storepool

import (
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	// The engines that come with the gateway; another registers itself
	// in the same namespace from its own package.
	_ "github.com/idemgate/idemgate/store/embedded"
	"github.com/idemgate/idemgate/store/postgres"
	_ "github.com/idemgate/idemgate/store/redis"
)

// Namespace is the namespace of the record store modules; the
// handler's "store" names one with "engine".
const Namespace = "idempotency.stores"

// DefaultEngine is the store when a config names none.
const DefaultEngine = "embedded"

// EngineName is the name of a store module in the namespace.
func EngineName(m caddy.Module) string {
	return strings.TrimPrefix(string(m.CaddyModule().ID), Namespace+".")
}

// UnmarshalCaddyfile sets up the store module that the `store` line names
// (the embedded store without one) from that line and the store's
// options, handed to the module as one block:
//
//	store <args...> {
//	    <option> <args...>
//	}
func UnmarshalCaddyfile(storeLine []caddyfile.Token, opts [][]caddyfile.Token) (Module, error) {
	name := DefaultEngine
	if storeLine == nil {
		var at caddyfile.Token
		if len(opts) > 0 {
			at = opts[0][0]
		}
		storeLine = []caddyfile.Token{
			{File: at.File, Line: at.Line, Text: "store"},
			{File: at.File, Line: at.Line, Text: DefaultEngine},
		}
	} else if arg := storeLine[1].Text; isEngine(arg) {
		name = arg
	} else if postgres.IsURL(arg) {
		name = "postgres"
	} else {
		name = "redis" // addresses
	}
	d := caddyfile.NewDispenser(storeBlock(storeLine, opts))
	info, err := caddy.GetModule(Namespace + "." + name)
	if err != nil {
		return nil, d.Errf("store %s: %v", name, err)
	}
	sm, ok := info.New().(Module)
	if !ok {
		return nil, d.Errf("module %s is not a record store", info.ID)
	}
	unm, ok := sm.(caddyfile.Unmarshaler)
	if !ok {
		return nil, d.Errf("module %s has no Caddyfile syntax; use JSON", info.ID)
	}
	if err := unm.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return sm, nil
}

// isEngine reports whether name is a store module's name.
func isEngine(name string) bool {
	_, err := caddy.GetModule(Namespace + "." + name)
	return err == nil
}

// storeBlock lays the store line and the option lines out as one
// Caddyfile segment. Tokens keep their file and line, for errors; a
// dispenser tells lines apart by increasing line numbers, so options are
// taken in file order and the store line is moved before an option that
// preceded it in the file.
func storeBlock(storeLine []caddyfile.Token, opts [][]caddyfile.Token) []caddyfile.Token {
	slices.SortStableFunc(opts, func(a, b []caddyfile.Token) int { return a[0].Line - b[0].Line })
	out := slices.Clone(storeLine)
	if len(opts) == 0 {
		return out
	}
	if first := opts[0][0].Line; first <= out[0].Line {
		for i := range out {
			out[i].Line = first - 1
		}
	}
	last := out[len(out)-1]
	out = append(out, caddyfile.Token{File: last.File, Line: last.Line, Text: "{"})
	end := 0
	for _, l := range opts {
		out = append(out, l...)
		end = max(end, l[len(l)-1].Line)
	}
	return append(out, caddyfile.Token{File: last.File, Line: end + 1, Text: "}"})
}
