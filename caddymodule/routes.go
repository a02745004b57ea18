package caddymodule

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/config"
)

// route is one resolved rule, ready for the request path.
type route struct {
	config.Resolved

	methods   map[string]bool
	path      pathPattern
	fpRule    string // the encoded fingerprint rule, stored with each record
	templates string // the key templates, for the "missing key" problem
	retry     map[int]bool
	verifier  atomic.Pointer[Verifier] // of the handler the route is in, for operator checks
	wait      bool                     // duplicates wait for the first request (waits)
}

// provisionRoutes loads the route rules (inline, or from RulesFile),
// checks them against the store's options and compiles them.
func (h *Handler) provisionRoutes(ctx caddy.Context) error {
	limits := config.Limits{OpTimeout: h.Store.opTimeout()}
	if h.RulesFile != "" {
		switch {
		case len(h.Routes) > 0:
			return errors.New("idempotency: rules_file and inline routes are both set; use one of them")
		case !reflect.ValueOf(h.Defaults).IsZero():
			return errors.New("idempotency: rules_file and inline defaults are both set; use one of them")
		}
		rules, err := config.Load(h.RulesFile, limits)
		if err != nil {
			return fmt.Errorf("idempotency rules: %w", err)
		}
		h.Rules = *rules
	}
	resolved, err := h.Rules.Resolve(limits)
	if err != nil {
		return fmt.Errorf("idempotency rules: %w", err)
	}
	h.routes, err = compileRoutes(ctx, resolved)
	return err
}

func compileRoutes(ctx caddy.Context, resolved []config.Resolved) ([]*route, error) {
	routes := make([]*route, 0, len(resolved))
	for _, res := range resolved {
		rt := &route{
			Resolved: res,
			methods:  make(map[string]bool, len(res.Methods)),
			fpRule:   res.Fingerprint.Encode(),
			retry:    make(map[int]bool, len(res.RetryStatuses)),
		}
		for _, m := range res.Methods {
			rt.methods[strings.ToUpper(m)] = true
		}
		for _, s := range res.RetryStatuses {
			rt.retry[s] = true
		}
		rt.templates = strings.Join(rt.templateList(), ", ")
		rt.wait = rt.waits()
		var err error
		if rt.path, err = compilePath(res.Path); err != nil {
			return nil, fmt.Errorf("route %s: path %q: %w", res.Name, res.Path, err)
		}
		routes = append(routes, rt)
	}
	return routes, nil
}

// templateList names the key templates, for the "missing key" problem.
func (rt *route) templateList() []string {
	names := make([]string, len(rt.Key))
	for i, t := range rt.Key {
		names[i] = t.String()
	}
	return names
}
