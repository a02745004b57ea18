package caddymodule

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// What a claim does when its key's record has expired but left a
// tombstone, and when its payload completed under another key (see
// docs/webhooks.md): the retention that follows the sender.

// Outcomes of requests the store refused for their retention.
const (
	// outcomeExpired: a retry after its record expired, refused
	// (after_expiry: reject).
	outcomeExpired = "expired"
	// outcomeSamePayload: the payload completed under another key, held
	// or refused (on_same_payload).
	outcomeSamePayload = "same_payload"
)

// samePayloadOptions asks the claim to look for the request's payload
// completed under another key (g.payload), on a route with a
// same_payload_window. A route that observes never has the store hold:
// it only says what enforce would have done, so a hold is asked as a
// refusal (which creates nothing) and forwarded unguarded as any
// refusal is.
func (g *guarded) samePayloadOptions(req *store.ClaimRequest) {
	rt := g.rt
	req.Twin, req.TwinWindow = g.payload, rt.SamePayloadWindow
	switch rt.OnSamePayload {
	case config.OnSamePayloadHold:
		req.OnTwin = store.TwinHold
		if rt.observing() {
			req.OnTwin = store.TwinReject
		}
	case config.OnSamePayloadReject:
		req.OnTwin = store.TwinReject
	}
}

// noteRetention counts and logs what a claim found of the key's expired
// record and of the payload under another key.
func (h *Handler) noteRetention(g *guarded, res store.ClaimResult) {
	rt := g.rt
	if t := res.Tombstone; t != nil {
		g.late = t
		h.metrics.LateRetries.WithLabelValues(rt.Name).Inc()
		h.logger.Warn("a retry came after its record expired",
			zap.String("route", rt.Name), zap.String("record_id", t.ID),
			zap.Time("completed_at", t.CompletedAt), zap.Int("stored_status", t.Status),
			zap.Duration("ttl", rt.TTL), zap.String("after_expiry", string(rt.AfterExpiry)))
	}
	if tw := res.Twin; tw != nil {
		g.twin = tw
		action := rt.OnSamePayload // resolved: warn unless the route says otherwise
		h.metrics.SamePayload.WithLabelValues(rt.Name, string(action)).Inc()
		h.logger.Warn("the payload of an operation completed under another key came with a new key",
			zap.String("route", rt.Name), zap.String("record_id", g.id), zap.String("same_as", tw.ID),
			zap.Time("same_as_completed_at", tw.CompletedAt), zap.String("action", string(action)))
	}
}

// refusedWould is what enforce does with a request the store created no
// record for: a late retry or a payload under another key, refused.
func (g *guarded) refusedWould() string {
	if g.late != nil && g.rt.AfterExpiry == config.AfterExpiryReject {
		return metrics.WouldExpired
	}
	return metrics.WouldSamePayload
}

// refused answers a request the store created no record for (see
// refusedWould): 409, nothing forwarded.
func (h *Handler) refused(g *guarded, w http.ResponseWriter) error {
	if g.refusedWould() == metrics.WouldExpired {
		g.outcome = outcomeExpired
		p := problem.Expired.With("this key's operation completed at "+g.late.CompletedAt.UTC().Format(time.RFC3339)+
			" and its record has expired; the route refuses retries after expiry (after_expiry: reject), so nothing was forwarded", g.rt.Name)
		p.RecordID = g.late.ID
		return h.problem(g, w, p)
	}
	return h.samePayload(g, w, nil)
}

// samePayload answers a request whose payload completed under another
// key: refused (rec nil) or held for an operator (rec).
func (h *Handler) samePayload(g *guarded, w http.ResponseWriter, rec *store.Record) error {
	g.outcome = outcomeSamePayload
	detail := "an operation with this payload completed under another key within the route's same_payload_window; nothing was forwarded"
	p := problem.SamePayload.With(detail, g.rt.Name)
	if rec != nil {
		p.Detail += "; it is held for an operator, who releases (the next retry executes) or completes record " + rec.ID
		p.RecordID = rec.ID
	}
	if g.twin != nil {
		p.SameAs = g.twin.ID
	}
	return h.problem(g, w, p)
}
