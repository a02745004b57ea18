package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/protocol/mcp"
	"github.com/idemgate/idemgate/routematch"
	"github.com/idemgate/idemgate/sealed"
	"github.com/idemgate/idemgate/signature"
)

// route is one resolved rule, compiled for the request path (see
// guard.Route). What a handler keeps for a route at run time is its
// routeRuntime.
type route = guard.Route

// provisionRoutes loads the route rules (inline, or from RulesFile),
// checks them against the store's options and compiles them.
func (h *Handler) provisionRoutes(ctx caddy.Context) error {
	limits := config.Limits{OpTimeout: h.opTimeout()}
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
	for _, w := range h.Rules.Warnings() {
		h.gate.Logger.Warn("route rules warning", zap.String("warning", w.Error()))
	}
	logSignedRoutes(h.gate.Logger, resolved)
	if h.routes, err = compileRoutes(ctx, resolved); err != nil {
		if h.RulesFile != "" {
			return fmt.Errorf("idempotency rules %s: %w", h.RulesFile, err)
		}
		return err
	}
	rules := make([]routematch.Rule, len(resolved))
	for i, res := range resolved {
		rules[i] = routematch.Rule{Methods: res.Methods, Path: res.Path}
	}
	if h.matcher, err = routematch.New(rules); err != nil {
		var re *routematch.Error
		if errors.As(err, &re) {
			return fmt.Errorf("route %s: %w", resolved[re.Index].Name, err)
		}
		return err
	}
	h.live = make([]routeRuntime, len(h.routes))
	h.gate.Calls = guard.NewRunningCalls(h.routes)
	return h.provisionBreakers(ctx)
}

// provisionBreakers gives each route with a retry.breaker its breaker:
// the one it had before a reload, if the reload kept it (see
// breakerOwner).
func (h *Handler) provisionBreakers(ctx caddy.Context) error {
	for i, rt := range h.routes {
		if rt.Breaker == nil {
			continue
		}
		b, key, err := breakers.Load(ctx, rt.Name, *rt.Breaker, metrics.Process.BreakerOpen)
		if err != nil {
			return fmt.Errorf("route %s: breaker: %w", rt.Name, err)
		}
		h.live[i].breaker = b
		h.breakerKeys = append(h.breakerKeys, key)
	}
	return nil
}

func compileRoutes(ctx caddy.Context, resolved []config.Resolved) ([]*route, error) {
	routes := make([]*route, 0, len(resolved))
	for i, res := range resolved {
		rt := &route{
			Resolved: res,
			Index:    i,
			FPRule:   res.Fingerprint.Encode(),
			Answers:  exchange.RulesOf(&res),
		}
		rt.Templates = strings.Join(rt.TemplateList(), ", ")
		rt.KeepHeaders = sealed.HeaderSet(&res)
		if len(res.RedriveHeaders) > 0 {
			repl := caddy.NewReplacer()
			rt.RedriveHeader = make(http.Header, len(res.RedriveHeaders))
			for _, hd := range res.RedriveHeaders {
				rt.RedriveHeader.Set(hd.Name, repl.ReplaceAll(hd.Value, ""))
			}
		}
		rt.Waiting = rt.Waits()
		if res.Protocol == config.ProtocolMCP {
			rt.ToolSet = mcp.NewTools(res.Tools)
		}
		if res.Signature != nil {
			repl := caddy.NewReplacer()
			fill := func(tmpl string) (string, error) { return repl.ReplaceOrErr(tmpl, true, true) }
			var err error
			if rt.Sig, err = signature.New(*res.Signature, fill); err != nil {
				return nil, fmt.Errorf("route %s (routes[%d]): %w", res.Name, i, err)
			}
		}
		routes = append(routes, rt)
	}
	return routes, nil
}

// resolvedRoutes is the config of h's routes, in order.
func (h *Handler) resolvedRoutes() []*config.Resolved {
	out := make([]*config.Resolved, len(h.routes))
	for i, rt := range h.routes {
		out[i] = &rt.Resolved
	}
	return out
}

// resolved is the config of h's routes, in order.
func (h *Handler) resolved() []config.Resolved {
	out := make([]config.Resolved, len(h.routes))
	for i, rt := range h.routes {
		out[i] = rt.Resolved
	}
	return out
}

// keepingRoutes names the routes that keep requests ("route a" or
// "routes a, b"), or is "" when none does.
func (h *Handler) keepingRoutes() string {
	var names []string
	for _, rt := range h.routes {
		if rt.KeepRequest {
			names = append(names, rt.Name)
		}
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return "route " + names[0]
	}
	return "routes " + strings.Join(names, ", ")
}

// logSignedRoutes logs, at info, what each signed route resolved to (what
// a sender preset chose, and what the route set itself): the scheme, the
// key, the tolerance, the ttl, the same-payload rule and where a signed
// URL comes from. Never a secret: not even its placeholder.
func logSignedRoutes(logger *zap.Logger, resolved []config.Resolved) {
	for i := range resolved {
		res := &resolved[i]
		if res.Signature == nil {
			continue
		}
		key := make([]string, len(res.Key))
		for j, t := range res.Key {
			key[j] = t.String()
		}
		fields := []zap.Field{zap.String("route", res.Name), zap.String("sender", res.Sender),
			zap.String("scheme", string(res.Signature.Scheme)), zap.Strings("key", key),
			zap.Duration("tolerance", res.Signature.Tolerance), zap.Duration("ttl", res.TTL),
			zap.Duration("same_payload_window", res.SamePayloadWindow), zap.String("on_same_payload", string(res.OnSamePayload))}
		if config.SignsURL(res.Signature.Scheme) {
			url := res.Signature.URL
			if url == "" {
				url = "rebuilt from the request (X-Forwarded-Proto and X-Forwarded-Host from trusted_proxies)"
			}
			fields = append(fields, zap.String("signed_url", url))
		}
		logger.Info("signed webhook route", fields...)
	}
}
