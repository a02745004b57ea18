package config

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// What a route does for webhook receivers: its key and scope under a
// signature, the statuses it stores although they mean "not done", and
// retention (tombstones, the same-payload detector).

// routeKey is a route's key templates: its own, else its sender
// preset's, else {header.webhook-id} for a standard-webhooks route.
func routeKey(rt *Route) []string {
	if len(rt.Key) > 0 {
		return rt.Key
	}
	if p, ok := routePreset(rt); ok {
		return p.Key
	}
	if rt.Signature != nil && rt.Signature.Scheme == SchemeStandardWebhooks {
		return []string{standardWebhooksKey}
	}
	return rt.Key
}

// retryStatuses is the effective set of statuses released: the route's
// or the defaults' retry_statuses (else the built-in ones) minus the
// route's or the defaults' store_statuses; nil when none.
func retryStatuses(rt, def *Policy) []int {
	retry := firstSlice(rt.RetryStatuses, def.RetryStatuses, defaultRetryStatuses)
	store := firstSlice(rt.StoreStatuses, def.StoreStatuses)
	var out []int
	for _, s := range retry {
		if !slices.Contains(store, s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// resolveWebhook fills in res's signature, scope, sender and retention
// fields. A sender preset the route names raises an inherited ttl to
// the sender's retry window and, when the route's key is not signed,
// holds the same payload under a new key within the ttl; what the route
// sets itself wins.
func resolveWebhook(res *Resolved, rt *Route, def *Policy) {
	res.Signature = resolveSignature(rt)
	preset, named := routePreset(rt)
	if named && rt.TTL == 0 {
		res.TTL = max(res.TTL, preset.Window)
	}
	if res.Signature != nil && rt.Scope == nil {
		res.Scope, res.ScopeSender = nil, true
	}
	if name, _ := routeSender("", rt); name != "" {
		res.Sender, res.SenderWindow = name, Senders[name].Window
	}
	res.TombstoneTTL = time.Duration(*cmp.Or(rt.TombstoneTTL, def.TombstoneTTL, new(OptDuration(defaultTombstoneTTL))))
	res.AfterExpiry = cmp.Or(rt.AfterExpiry, def.AfterExpiry, AfterExpiryExecute)
	res.SamePayloadWindow = time.Duration(*cmp.Or(rt.SamePayloadWindow, def.SamePayloadWindow, new(OptDuration(0))))
	res.OnSamePayload = cmp.Or(rt.OnSamePayload, def.OnSamePayload, OnSamePayloadWarn)
	if named && rt.SamePayloadWindow == nil && rt.OnSamePayload == "" {
		if w, action, ok := presetSamePayload(res); ok {
			res.SamePayloadWindow, res.OnSamePayload = w, action
		}
	}
}

// storeStatuses checks a policy's store_statuses (f is "defaults." or
// "routes[i]."): 4xx statuses, none also in the same policy's
// retry_statuses.
func (c *errorList) storeStatuses(f string, p *Policy) {
	for j, s := range p.StoreStatuses {
		switch k := slices.Index(p.StoreStatuses, s); {
		case s < 400 || s > 499:
			c.add(at(f+"store_statuses", j), "%d is not a 4xx status: a 5xx outside retry_statuses is an unknown outcome (see on_unknown_outcome), a 307 or 308 follows on_redirect", s)
		case k < j:
			c.add(at(f+"store_statuses", j), "%d is already listed at [%d]", s, k)
		case slices.Contains(p.RetryStatuses, s):
			c.add(at(f+"store_statuses", j), "%d is also in %sretry_statuses: a status is either released or stored; remove it from one list", s, f)
		}
	}
}

// statusLists warns of a route's store_statuses entry that is not in
// its retry_statuses: it is stored anyway.
func (c *errorList) statusLists(i int, rt *Route, def *Policy) {
	f, store := "routes["+strconv.Itoa(i)+"].", rt.StoreStatuses
	if store == nil {
		return
	}
	retry := firstSlice(rt.RetryStatuses, def.RetryStatuses, defaultRetryStatuses)
	for j, s := range store {
		if s >= 400 && s <= 499 && !slices.Contains(retry, s) {
			c.warn(at(f+"store_statuses", j), "%d is not in the route's retry_statuses: it is stored anyway", s)
		}
	}
}

// retention checks a policy's tombstone_ttl, after_expiry,
// same_payload_window and on_same_payload.
func (c *errorList) retention(f string, p *Policy) {
	optDuration(c, f+"tombstone_ttl", p.TombstoneTTL, maxTombstoneTTL)
	enum(c, f+"after_expiry", p.AfterExpiry, AfterExpiryExecute, AfterExpiryReject)
	optDuration(c, f+"same_payload_window", p.SamePayloadWindow, maxSamePayloadWindow)
	enum(c, f+"on_same_payload", p.OnSamePayload, OnSamePayloadWarn, OnSamePayloadHold, OnSamePayloadReject)
	if p.AfterExpiry == AfterExpiryReject && p.TombstoneTTL != nil && *p.TombstoneTTL == 0 {
		c.add(f+"after_expiry", "is reject, but tombstone_ttl is 0s: without tombstones no retry is known to be late")
	}
}

// optDuration checks a set OptDuration: 0 (off), or 1s to max.
func optDuration(c *errorList, field string, d *OptDuration, max time.Duration) {
	switch {
	case d == nil || *d == 0:
	case *d < 0:
		c.add(field, "must be positive or 0s (off), got %s", d)
	case time.Duration(*d) > max:
		c.add(field, "must be at most %s, got %s", max, d)
	default:
		c.duration(field, Duration(*d), time.Second)
	}
}

// samePayload warns of an on_same_payload that no window makes work.
func (c *errorList) samePayload(r *Rules) {
	windows := make([]bool, len(r.Routes))
	anyWindow := false
	for i := range r.Routes {
		w := cmp.Or(r.Routes[i].SamePayloadWindow, r.Defaults.SamePayloadWindow, new(OptDuration(0)))
		windows[i] = *w != 0
		anyWindow = anyWindow || windows[i]
	}
	if r.Defaults.OnSamePayload != "" && !anyWindow {
		c.warn("defaults.on_same_payload", "does nothing: no route has a same_payload_window")
	}
	for i := range r.Routes {
		if r.Routes[i].OnSamePayload != "" && !windows[i] {
			c.warn("routes["+strconv.Itoa(i)+"].on_same_payload", "does nothing: the route has no same_payload_window")
		}
	}
}
