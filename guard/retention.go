package guard

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

// samePayloadOptions asks the claim to look for the request's payload
// completed under another key (op.Payload), on a route with a
// same_payload_window. A route that observes never has the store hold:
// it only says what enforce would have done, so a hold is asked as a
// refusal (which creates nothing) and forwarded unguarded as any
// refusal is.
func samePayloadOptions(op *Operation, req *store.ClaimRequest) {
	rt := op.Route
	req.Twin, req.TwinWindow = op.Payload, rt.SamePayloadWindow
	switch rt.OnSamePayload {
	case config.OnSamePayloadHold:
		req.OnTwin = store.TwinHold
		if rt.Observing() {
			req.OnTwin = store.TwinReject
		}
	case config.OnSamePayloadReject:
		req.OnTwin = store.TwinReject
	}
}

// noteRetention counts and logs what a claim found of the key's expired
// record and of the payload under another key.
func (g *Gate) noteRetention(op *Operation, f *Found, res store.ClaimResult) {
	rt := op.Route
	if t := res.Tombstone; t != nil {
		f.Late = t
		g.Metrics.LateRetries.WithLabelValues(rt.Name).Inc()
		g.Logger.Warn("a retry came after its record expired",
			zap.String("route", rt.Name), zap.String("record_id", t.ID),
			zap.Time("completed_at", t.CompletedAt), zap.Int("stored_status", t.Status),
			zap.Duration("ttl", rt.TTL), zap.String("after_expiry", string(rt.AfterExpiry)))
	}
	if tw := res.Twin; tw != nil {
		f.Twin = tw
		action := rt.OnSamePayload // resolved: warn unless the route says otherwise
		g.Metrics.SamePayload.WithLabelValues(rt.Name, string(action)).Inc()
		g.Logger.Warn("the payload of an operation completed under another key came with a new key",
			zap.String("route", rt.Name), zap.String("record_id", op.ID), zap.String("same_as", tw.ID),
			zap.Time("same_as_completed_at", tw.CompletedAt), zap.String("action", string(action)))
	}
}

// RefusedWould is what enforce does with a request the store created no
// record for: a late retry or a payload under another key, refused.
func RefusedWould(rt *Route, f *Found) string {
	if f.Late != nil && rt.AfterExpiry == config.AfterExpiryReject {
		return metrics.WouldExpired
	}
	return metrics.WouldSamePayload
}

// refused answers a request the store created no record for (see
// RefusedWould): 409, nothing forwarded.
func (g *Gate) refused(op *Operation, f *Found, w http.ResponseWriter) (Outcome, error) {
	rt := op.Route
	if RefusedWould(rt, f) == metrics.WouldExpired {
		p := problem.Expired.With("this key's operation completed at "+f.Late.CompletedAt.UTC().Format(time.RFC3339)+
			" and its record has expired; the route refuses retries after expiry (after_expiry: reject), so nothing was forwarded", rt.Name)
		p.RecordID = f.Late.ID
		return Refuse(op, w, OutcomeExpired, p)
	}
	return g.samePayload(op, f, w, nil)
}

// samePayload answers a request whose payload completed under another
// key: refused (rec nil) or held for an operator (rec).
func (g *Gate) samePayload(op *Operation, f *Found, w http.ResponseWriter, rec *store.Record) (Outcome, error) {
	detail := "an operation with this payload completed under another key within the route's same_payload_window; nothing was forwarded"
	p := problem.SamePayload.With(detail, op.Route.Name)
	if rec != nil {
		p.Detail += "; it is held for an operator, who releases (the next retry executes) or completes record " + rec.ID
		p.RecordID = rec.ID
	}
	if f.Twin != nil {
		p.SameAs = f.Twin.ID
	}
	return Refuse(op, w, OutcomeSamePayload, p)
}
