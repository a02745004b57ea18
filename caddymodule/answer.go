package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// answer responds from an existing record: replay, conflict or mismatch.
func (h *Handler) answer(g *guarded, w http.ResponseWriter) error {
	rec := g.rec
	if rec == nil {
		return h.refused(g, w)
	}
	if !h.sameFingerprint(g, rec) {
		g.outcome = outcomeMismatch
		from, header := keySource(g.rt, g.keyFrom)
		p := problem.KeyReused.With(fmt.Sprintf("this key%s was first used with a different request payload on route %s; nothing was forwarded", from, g.rt.Name), g.rt.Name)
		if !header {
			p.Title = problem.KeyReusedKeyTitle
		}
		p.RecordID = rec.ID
		return h.problem(g, w, p)
	}
	switch rec.State {
	case store.StateCompleted:
		g.outcome = outcomeReplayed
		g.status = rec.Status
		if g.call != nil {
			return replayCall(g, w, rec)
		}
		return replay(w, rec)
	case store.StateUnknown:
		switch {
		case rec.Class() == store.StateExhausted:
			return h.exhausted(g, w, rec)
		case rec.Reason == store.ReasonSamePayload:
			return h.samePayload(g, w, rec)
		}
		g.outcome = outcomeUnknown
		p := problem.Unknown.With("an earlier attempt reached the upstream but its outcome is not known; an operator must release or complete record "+rec.ID, g.rt.Name)
		p.RecordID = rec.ID
		withNextCheck(&p, rec, g.now)
		return h.problem(g, w, p)
	default:
		g.outcome = outcomeInFlight
		p := inFlight(g.rt, g.keyFrom)
		// The store's clock, not this gateway's: instances with skewed
		// clocks give the same hint.
		if left := rec.LeaseUntil.Sub(g.now); left > time.Second {
			p.RetryAfter = int(min(left, g.rt.LockLease).Seconds())
		}
		return h.problem(g, w, p)
	}
}

// inFlight is the 409 for a key whose first request is still running,
// naming where the key came from (keySource).
func inFlight(rt *route, keyFrom int) problem.Problem {
	from, header := keySource(rt, keyFrom)
	p := problem.InFlight.With("the first request with this key"+from+" is still being processed; retry later", rt.Name)
	if !header {
		p.Title = problem.InFlightKeyTitle
	}
	return p
}

// keySource says where a key came from, for a problem's detail: "" when
// the route's template is not known, else its Idempotency-Key header or
// the key template; header reports whether the IETF draft's titles,
// which name the Idempotency-Key header, fit the key.
func keySource(rt *route, keyFrom int) (from string, header bool) {
	if keyFrom < 0 || keyFrom >= len(rt.Key) {
		return "", true
	}
	src := rt.Key[keyFrom].String()
	if strings.EqualFold(src, "{header.Idempotency-Key}") {
		return " (from its Idempotency-Key header)", true
	}
	return " (from the route's key template " + src + ")", false
}

// exhausted answers a retry of an operation held because its retries were
// used up: nothing is forwarded until an operator acts.
func (h *Handler) exhausted(g *guarded, w http.ResponseWriter, rec *store.Record) error {
	g.outcome = outcomeExhausted
	detail := fmt.Sprintf("the upstream answered \"not done\" to %d executions of this operation; it is held for an operator (release, complete or run it now) and nothing is forwarded meanwhile; record %s", rec.NotDone, rec.ID)
	if n := len(rec.Answers); n > 0 {
		last := rec.Answers[n-1]
		detail += fmt.Sprintf("; the last answer was %d at %s", last.Status, last.At.UTC().Format(time.RFC3339))
	}
	p := problem.Exhausted.With(detail, g.rt.Name)
	p.RecordID = rec.ID
	return h.problem(g, w, p)
}

// sameFingerprint compares the request with the record, under the
// fingerprint rule that made the record: a reload that changed the rule
// must not turn a genuine retry into a mismatch.
func (h *Handler) sameFingerprint(g *guarded, rec *store.Record) bool {
	if rec.FingerprintRule == g.rt.fpRule {
		return rec.Fingerprint == g.fp
	}
	_, same := h.fingerprintUnder(g, rec)
	return same
}

// fingerprintUnder computes the request's fingerprint under the rule that
// made rec, and whether it equals the record's.
func (h *Handler) fingerprintUnder(g *guarded, rec *store.Record) (string, bool) {
	rule, err := keying.ParseFingerprintRule(rec.FingerprintRule)
	if err != nil {
		h.logger.Warn("record has an unreadable fingerprint rule", zap.String("record_id", rec.ID), zap.Error(err))
		return "", false
	}
	fp, err := keying.Fingerprint(g.method, rec.Operation, g.in, rule)
	return fp, err == nil && fp == rec.Fingerprint
}

// replay writes a stored response: status, headers and body as they were,
// plus Idempotent-Replayed. The Server header Caddy set for this answer
// goes: the stored headers say who answered the first time (behind
// reverse_proxy: the upstream's Server or none, and Caddy's Via).
func replay(w http.ResponseWriter, rec *store.Record) error {
	hdr := w.Header()
	delete(hdr, "Server")
	for name, values := range rec.Header {
		hdr[name] = values
	}
	hdr.Set("Idempotent-Replayed", "true")
	if rec.BodyOmitted {
		hdr.Set("Idempotent-Body-Omitted", "true")
	}
	hdr.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	w.WriteHeader(rec.Status)
	_, err := w.Write(rec.Body)
	return err
}

// withNextCheck tells a retry that got 409 for a held record when its
// outcome is checked next, if it is.
func withNextCheck(p *problem.Problem, rec *store.Record, now time.Time) {
	if rec.NextCheck.IsZero() {
		if len(rec.Checks) > 0 {
			p.Detail += fmt.Sprintf("; %d verification checks could not settle it", rec.CheckCount)
		}
		return
	}
	next := rec.NextCheck.UTC()
	p.NextCheck = &next
	p.Detail += "; it is being verified with the upstream, next check at " + next.Format(time.RFC3339)
	if now.IsZero() {
		now = time.Now()
	}
	p.RetryAfter = int(max(next.Sub(now).Round(time.Second), time.Second) / time.Second)
}

// reject answers a request whose body or key cannot be used.
func (h *Handler) reject(g *guarded, w http.ResponseWriter, err error) error {
	switch {
	case errors.Is(err, exchange.ErrTooLarge):
		return h.problem(g, w, problem.TooLarge.With(fmt.Sprintf("the request body exceeds %d bytes", g.rt.MaxBody), g.rt.Name))
	case errors.Is(err, keying.ErrTooDeep):
		return h.problem(g, w, problem.TooDeep.With(fmt.Sprintf("the request body nests arrays and objects deeper than %d levels; nothing was forwarded", keying.MaxDepth), g.rt.Name))
	case errors.Is(err, keying.ErrMalformedJSON):
		return h.problem(g, w, problem.BadJSON.With("route "+g.rt.Name+" reads fields of the request body, which is not valid JSON", g.rt.Name))
	default:
		return h.problem(g, w, problem.BadBody.With("the request body could not be read", g.rt.Name))
	}
}

func (h *Handler) problem(g *guarded, w http.ResponseWriter, p problem.Problem) error {
	g.status = p.Status
	p.Owner = g.rt.Owner
	if g.rt.tools != nil {
		return toolError(g, w, p)
	}
	return p.Write(w)
}
