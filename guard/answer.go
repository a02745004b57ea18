package guard

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

// Answer responds from the record the claim found (f): replay,
// conflict or mismatch, or the refusal of a request the store created
// no record for.
func (g *Gate) Answer(op *Operation, f *Found, w http.ResponseWriter) (Outcome, error) {
	rec := f.Record
	if rec == nil {
		return g.refused(op, f, w)
	}
	rt := op.Route
	if !g.SameFingerprint(op, rec) {
		from, header := keySource(rt, op.KeyFrom)
		p := problem.KeyReused.With(fmt.Sprintf("this key%s was first used with a different request payload on route %s; nothing was forwarded", from, rt.Name), rt.Name)
		if !header {
			p.Title = problem.KeyReusedKeyTitle
		}
		p.RecordID = rec.ID
		return Refuse(op, w, OutcomeMismatch, p)
	}
	switch rec.State {
	case store.StateCompleted:
		out := Outcome{Name: OutcomeReplayed, Status: rec.Status}
		if op.Call != nil {
			return out, replayCall(op, w, rec)
		}
		return out, replay(w, rec)
	case store.StateUnknown:
		switch {
		case rec.Class() == store.StateExhausted:
			return exhausted(op, w, rec)
		case rec.Reason == store.ReasonSamePayload:
			return g.samePayload(op, f, w, rec)
		}
		p := problem.Unknown.With("an earlier attempt reached the upstream but its outcome is not known; an operator must release or complete record "+rec.ID, rt.Name)
		p.RecordID = rec.ID
		withNextCheck(&p, rec, f.Now)
		return Refuse(op, w, OutcomeUnknown, p)
	default:
		p := inFlight(rt, op.KeyFrom)
		// The store's clock, not this gateway's: instances with skewed
		// clocks give the same hint.
		if left := rec.LeaseUntil.Sub(f.Now); left > time.Second {
			p.RetryAfter = int(min(left, rt.LockLease).Seconds())
		}
		return Refuse(op, w, OutcomeInFlight, p)
	}
}

// inFlight is the 409 for a key whose first request is still running,
// naming where the key came from (keySource).
func inFlight(rt *Route, keyFrom int) problem.Problem {
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
func keySource(rt *Route, keyFrom int) (from string, header bool) {
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
func exhausted(op *Operation, w http.ResponseWriter, rec *store.Record) (Outcome, error) {
	detail := fmt.Sprintf("the upstream answered \"not done\" to %d executions of this operation; it is held for an operator (release, complete or run it now) and nothing is forwarded meanwhile; record %s", rec.NotDone, rec.ID)
	if n := len(rec.Answers); n > 0 {
		last := rec.Answers[n-1]
		detail += fmt.Sprintf("; the last answer was %d at %s", last.Status, last.At.UTC().Format(time.RFC3339))
	}
	p := problem.Exhausted.With(detail, op.Route.Name)
	p.RecordID = rec.ID
	return Refuse(op, w, OutcomeExhausted, p)
}

// SameFingerprint compares the request with the record, under the
// fingerprint rule that made the record: a reload that changed the rule
// must not turn a genuine retry into a mismatch.
func (g *Gate) SameFingerprint(op *Operation, rec *store.Record) bool {
	if rec.FingerprintRule == op.Route.FPRule {
		return rec.Fingerprint == op.FP
	}
	_, same := g.fingerprintUnder(op, rec)
	return same
}

// fingerprintUnder computes the request's fingerprint under the rule that
// made rec, and whether it equals the record's.
func (g *Gate) fingerprintUnder(op *Operation, rec *store.Record) (string, bool) {
	rule, err := keying.ParseFingerprintRule(rec.FingerprintRule)
	if err != nil {
		g.Logger.Warn("record has an unreadable fingerprint rule", zap.String("record_id", rec.ID), zap.Error(err))
		return "", false
	}
	fp, err := keying.Fingerprint(op.Method, rec.Operation, op.In, rule)
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

// Reject answers a request whose body or key cannot be used.
func Reject(op *Operation, w http.ResponseWriter, err error) (Outcome, error) {
	rt := op.Route
	var p problem.Problem
	switch {
	case errors.Is(err, exchange.ErrTooLarge):
		p = problem.TooLarge.With(fmt.Sprintf("the request body exceeds %d bytes", rt.MaxBody), rt.Name)
	case errors.Is(err, keying.ErrTooDeep):
		p = problem.TooDeep.With(fmt.Sprintf("the request body nests arrays and objects deeper than %d levels; nothing was forwarded", keying.MaxDepth), rt.Name)
	case errors.Is(err, keying.ErrMalformedJSON):
		p = problem.BadJSON.With("route "+rt.Name+" reads fields of the request body, which is not valid JSON", rt.Name)
	default:
		p = problem.BadBody.With("the request body could not be read", rt.Name)
	}
	return Refuse(op, w, OutcomeInvalid, p)
}

// Refuse answers the request with problem p, as problem+json (on an MCP
// route, as a JSON-RPC error); name is the outcome it counts as.
func Refuse(op *Operation, w http.ResponseWriter, name string, p problem.Problem) (Outcome, error) {
	p.Owner = op.Route.Owner
	if op.Route.ToolSet != nil {
		return Outcome{Name: name, Status: http.StatusOK}, toolError(op, w, p)
	}
	return Outcome{Name: name, Status: p.Status}, p.Write(w)
}
