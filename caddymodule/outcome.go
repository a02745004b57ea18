package caddymodule

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

// verdict is what an upstream call means for its claim.
type verdict int

const (
	// verdictComplete: a result to store and replay.
	verdictComplete verdict = iota
	// verdictRelease: the upstream said "not done" (a retry status) or
	// never received the request; the next retry executes.
	verdictRelease
	// verdictUnknown: the upstream may have acted and nobody knows; the
	// route's on_unknown_outcome decides.
	verdictUnknown
)

// outcome classifies one upstream call.
type outcome struct {
	verdict verdict
	status  int    // the status the client got (or the handler error's)
	reason  string // why a claim is released or held
}

// classify tells a stored result from "never sent" from "sent, no answer".
func classify(rt *route, cw *capture, err error, panicked any) outcome {
	switch {
	case panicked != nil:
		// reverse_proxy aborts with http.ErrAbortHandler when the upstream's
		// body breaks after the status went out.
		return outcome{verdictUnknown, cw.status, "response_aborted"}
	case err != nil:
		if cw.status == 0 && neverSent(err) {
			return outcome{verdictRelease, errorStatus(err), "not_sent"}
		}
		return outcome{verdictUnknown, errorStatus(err), "upstream_error"}
	case cw.status == 0:
		// Nothing written: the server answers 200 with an empty body.
		return outcome{verdictComplete, http.StatusOK, ""}
	case cw.status == http.StatusSwitchingProtocols:
		return outcome{verdictRelease, cw.status, "switching_protocols"}
	case cw.status == 499:
		return outcome{verdictUnknown, cw.status, "client_closed"}
	case rt.retry[cw.status]:
		return outcome{verdictRelease, cw.status, "retry_status"}
	case cw.status >= 500:
		return outcome{verdictUnknown, cw.status, "upstream_5xx"}
	default:
		return outcome{verdictComplete, cw.status, ""}
	}
}

// neverSent reports whether the proxy failed before the request left: a
// dial error, or no upstream available.
func neverSent(err error) bool {
	var de reverseproxy.DialError
	if errors.As(err, &de) {
		return true
	}
	return strings.Contains(err.Error(), "no upstreams available")
}

func errorStatus(err error) int {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return http.StatusBadGateway
}

// settle records the call's outcome under the claim's token.
func (h *Handler) settle(g *guarded, token string, cw *capture, out outcome) {
	g.outcome = outcomeExecuted
	g.status = out.status
	v := out.verdict
	if v == verdictUnknown {
		switch g.rt.OnUnknownOutcome {
		case "release":
			v = verdictRelease
		case "store":
			v = verdictComplete
		}
	}
	// Not the request's context: the outcome is recorded even when the
	// client has gone. The store bounds the call by op_timeout.
	ctx := context.Background()
	var (
		ok     bool
		err    error
		op     string
		result string
		began  = time.Now()
	)
	switch v {
	case verdictComplete:
		op, result = "complete", "completed"
		ok, err = h.store.Complete(ctx, store.CompleteRequest{
			Claim: store.ClaimRequest{
				ID: g.id, Token: token, Route: g.rec.Route, Operation: g.rec.Operation,
				Fingerprint: g.rec.Fingerprint, FingerprintRule: g.rec.FingerprintRule,
			},
			StartedAt: g.rec.StartedAt,
			Result:    storedResult(g.rt, cw, out),
			TTL:       g.rt.TTL,
		})
	case verdictRelease:
		op, result = "release", "released"
		if out.reason == "not_sent" {
			result = "not_sent"
		}
		ok, err = h.store.Release(ctx, g.id, token, g.rt.TTL)
	default:
		op, result = "hold", "held"
		g.note = "held: " + out.reason
		ok, err = h.store.MarkUnknown(ctx, g.id, token, out.reason, g.rt.HoldTTL)
	}
	h.metrics.observeStore(op, began, err)
	h.metrics.executions.WithLabelValues(g.rt.Name, result).Inc()
	switch {
	case err != nil:
		// The client still gets the upstream's answer; the record keeps
		// its lease and turns "outcome unknown" when it runs out. The call
		// is never repeated.
		h.metrics.storeErrors.WithLabelValues(g.rt.Name, op).Inc()
		h.logger.Error("recording the upstream outcome failed; the record will surface as outcome unknown",
			zap.String("route", g.rt.Name), zap.String("key_id", g.id), zap.String("step", op), zap.Error(err))
	case !ok:
		h.logger.Warn("the claim was taken over while the upstream call ran; its outcome was not recorded",
			zap.String("route", g.rt.Name), zap.String("key_id", g.id), zap.String("step", op))
	}
}

// storedResult is what a completed call leaves for replays.
func storedResult(rt *route, cw *capture, out outcome) store.Result {
	res := store.Result{
		Status: out.status,
		Header: cw.header, // already storable (see capture.WriteHeader)
		Digest: hex.EncodeToString(cw.sum()),
	}
	if cw.overflow || cw.streaming {
		res.BodyOmitted = true
	} else {
		res.Body = cw.body()
	}
	if rt.ExternalID != "" && res.Body != nil {
		if v := gjson.GetBytes(res.Body, rt.ExternalID); v.Exists() && len(v.String()) <= 255 {
			res.ExternalID = v.String()
		}
	}
	return res
}

// unstoredHeaders are never replayed: hop-by-hop headers, and those the
// replaying server sets for itself.
var unstoredHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Server", "Alt-Svc", "Via", "Date", "Content-Length", "Idempotent-Replayed",
}

var unstored = func() map[string]bool {
	m := make(map[string]bool, len(unstoredHeaders))
	for _, name := range unstoredHeaders {
		m[name] = true
	}
	return m
}()

// storableHeader copies h without hop-by-hop and per-server headers (and
// those the Connection header lists), in one pass: the values of all kept
// names share one backing array, as in http.Header.Clone.
func storableHeader(h http.Header) http.Header {
	var hop []string // names listed in Connection
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			hop = append(hop, textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)))
		}
	}
	keep := func(name string) bool { return !unstored[name] && !slices.Contains(hop, name) }
	n, names := 0, 0
	for name, vv := range h {
		if keep(name) {
			n += len(vv)
			names++
		}
	}
	out := make(http.Header, names)
	block := make([]string, n)
	for name, vv := range h {
		if !keep(name) {
			continue
		}
		if vv == nil {
			out[name] = nil
			continue
		}
		k := copy(block, vv)
		out[name] = block[:k:k]
		block = block[k:]
	}
	return out
}
