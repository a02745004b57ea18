package guard

import (
	"net/http"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/protocol/mcp"
	"github.com/idemgate/idemgate/signature"
)

// Route is one resolved rule, compiled for the request path: config
// only (the handler compiles it; what it keeps for a route at run time
// is its own).
type Route struct {
	config.Resolved
	Index int // the route's place in the handler's routes

	FPRule    string         // the encoded fingerprint rule, stored with each record
	Templates string         // the key templates, for the "missing key" problem
	Answers   exchange.Rules // what the upstream's answers mean (retry statuses, on_redirect, external_id)
	// KeepHeaders are the request headers a kept request carries (see
	// sealed.HeaderSet), canonical.
	KeepHeaders map[string]bool
	// RedriveHeader is redrive_headers with {env.*} filled in.
	RedriveHeader http.Header
	Waiting       bool // duplicates wait for the first request (Waits)
	// Sig checks the route's signature with its secrets filled in; nil
	// when the route has no signature.
	Sig *signature.Verifier
	// ToolSet are the MCP tools guarded (protocol: mcp); nil on other
	// routes.
	ToolSet mcp.Tools
}

// Observing reports whether the route only observes.
func (rt *Route) Observing() bool { return rt.Mode == config.ModeObserve }

// Waits reports whether duplicates of the route wait for the first.
func (rt *Route) Waits() bool {
	return rt.OnInFlight == config.OnInFlightWait && !rt.Observing()
}

// TemplateList names the route's key templates, in order.
func (rt *Route) TemplateList() []string {
	names := make([]string, len(rt.Key))
	for i, t := range rt.Key {
		names[i] = t.String()
	}
	return names
}
