package caddymodule

import (
	"bytes"
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

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// verdict is what an upstream call means for its claim.
type verdict int

const (
	// verdictComplete: a result to store and replay.
	verdictComplete verdict = iota
	// verdictRelease: the upstream said "not done" (a retry status, a
	// 307 or 308 redirect) or never received the request; the next retry
	// executes.
	verdictRelease
	// verdictUnknown: the upstream may have acted and nobody knows; the
	// route's on_unknown_outcome decides.
	verdictUnknown
)

// callResult classifies one upstream call: what it means for its claim.
type callResult struct {
	verdict verdict
	status  int    // the status the client got (or the handler error's)
	reason  string // why a claim is released or held
	// cutOff: the response broke off (aborted mid-body, shorter than its
	// Content-Length, an error after the status went out) or never had a
	// status. It is never stored as a result, whatever the route's
	// on_unknown_outcome: a replay would serve a truncated or invented
	// response as if it were the upstream's.
	cutOff bool
}

// classify tells a stored result from "never sent" from "sent, no answer".
func classify(rt *route, cw *capture, err error, panicked any) callResult {
	switch {
	case panicked != nil:
		// reverse_proxy aborts with http.ErrAbortHandler when the upstream's
		// body breaks after the status went out.
		return callResult{verdictUnknown, cw.status, "response_aborted", true}
	case err != nil:
		if cw.status == 0 && neverSent(err) {
			return callResult{verdictRelease, errorStatus(err), "not_sent", false}
		}
		return callResult{verdictUnknown, errorStatus(err), "upstream_error", true}
	case cw.short():
		return callResult{verdictUnknown, cw.status, "response_cut_off", true}
	case cw.status == 0:
		// Nothing written: the server answers 200 with an empty body.
		return callResult{verdictComplete, http.StatusOK, "", false}
	case cw.status == http.StatusSwitchingProtocols:
		return callResult{verdictRelease, cw.status, "switching_protocols", false}
	case cw.status == 499:
		return callResult{verdictUnknown, cw.status, "client_closed", true}
	case rt.retry[cw.status]:
		return callResult{verdictRelease, cw.status, "retry_status", false}
	case isRedirect(cw.status) && rt.OnRedirect != config.OnRedirectStore:
		// The upstream asks for the same request at another URL: it did
		// nothing here, and the redirected request runs under this key.
		return callResult{verdictRelease, cw.status, "redirect", false}
	case cw.status >= 500:
		return callResult{verdictUnknown, cw.status, "upstream_5xx", false}
	default:
		return callResult{verdictComplete, cw.status, "", false}
	}
}

// isRedirect reports whether status asks for the same request (method and
// body) at another URL: 307 and 308. 301, 302 and 303 let clients switch
// to GET, and are results.
func isRedirect(status int) bool {
	return status == http.StatusTemporaryRedirect || status == http.StatusPermanentRedirect
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

// recording is the one store call that records a call's outcome.
type recording struct {
	op     string // complete | release | hold: the store step, for metrics and logs
	result string // the executions metric's label
	call   func(ctx context.Context) (bool, error)
}

// completing is the recording that stores res under c. Its body may be the
// capture's pooled buffer: see detached.
func completing(c *store.Claim, res store.Result) recording {
	return recording{"complete", "completed", func(ctx context.Context) (bool, error) { return c.Complete(ctx, res) }}
}

// recordingFor decides what the outcome leaves on the record, by the
// route's policy for unknown outcomes.
func recordingFor(rt *route, c *store.Claim, cw *capture, out callResult) recording {
	v := out.verdict
	if v == verdictUnknown {
		switch rt.OnUnknownOutcome {
		case config.OnUnknownRelease:
			v = verdictRelease
		case config.OnUnknownStore:
			if !out.cutOff {
				v = verdictComplete
			}
		}
	}
	switch v {
	case verdictComplete:
		return completing(c, storedResult(rt, cw, out))
	case verdictRelease:
		result := "released"
		if out.reason == "not_sent" {
			result = "not_sent"
		}
		return recording{"release", result, c.Release}
	default:
		return recording{"hold", "held", func(ctx context.Context) (bool, error) { return c.MarkUnknown(ctx, out.reason) }}
	}
}

// settle records the call's outcome under its claim. The client already
// has the upstream's answer, and the call is never repeated: a store that
// fails now (a stall, a failover) is tried again in the background, under
// the same token, until the claim's lease would have run out. A result
// whose claim a failover lost is written anew (see store.CompleteRequest).
func (h *Handler) settle(g *guarded, c *store.Claim, out callResult, cw *capture) {
	g.outcome = outcomeExecuted
	g.status = out.status
	rec := recordingFor(g.rt, c, cw, out)
	if rec.op == "hold" {
		g.note = "held: " + out.reason
		if !g.check.IsZero() {
			h.scheduleChecks(g.rt, c)
		}
	}
	h.metrics.executions.WithLabelValues(g.rt.Name, rec.result).Inc()
	deadline := time.Now().Add(c.Lease())
	if ok, err := h.recordOnce(g.rt.Name, c.ID(), rec); err != nil {
		h.logger.Warn("recording the upstream outcome failed; retrying in the background until the lease runs out",
			zap.String("route", g.rt.Name), zap.String("record_id", c.ID()), zap.String("step", rec.op), zap.Error(err))
		if rec.op == "complete" {
			// The capture's buffer goes back to its pool when the request
			// ends: the background tries keep a copy of their own.
			res := storedResult(g.rt, cw, out)
			res.Body = bytes.Clone(res.Body)
			rec = completing(c, res)
		}
		h.enter()
		go h.keepRecording(g.rt.Name, c.ID(), rec, deadline)
	} else if !ok {
		h.claimLost(g.rt.Name, c.ID(), rec.op)
	}
}

// recordOnce makes one try, bounded by the store's op_timeout. Not the
// request's context: the outcome is recorded even when the client has gone.
func (h *Handler) recordOnce(route, id string, rec recording) (bool, error) {
	began := time.Now()
	ok, err := rec.call(context.Background())
	h.metrics.observeStore(rec.op, began, err)
	if err != nil {
		h.metrics.storeErrors.WithLabelValues(route, rec.op).Inc()
	}
	return ok, err
}

// Retry pacing of keepRecording.
const (
	recordRetryFirst = 50 * time.Millisecond
	recordRetryMax   = time.Second
)

// keepRecording tries rec again, with growing pauses, until it lands or
// deadline passes. It runs in the background and leaves the handler when
// done.
func (h *Handler) keepRecording(route, id string, rec recording, deadline time.Time) {
	defer h.leave()
	pause := recordRetryFirst
	for tries := 2; ; tries++ {
		if time.Now().Add(pause).After(deadline) {
			h.logger.Error("gave up recording the upstream outcome; the record will surface as outcome unknown",
				zap.String("route", route), zap.String("record_id", id), zap.String("step", rec.op), zap.Int("tries", tries-1))
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, recordRetryMax)
		ok, err := h.recordOnce(route, id, rec)
		switch {
		case err != nil:
			h.logger.Debug("recording the upstream outcome failed again", zap.String("record_id", id), zap.Int("try", tries), zap.Error(err))
			continue
		case !ok:
			h.claimLost(route, id, rec.op)
		default:
			h.logger.Info("recorded the upstream outcome after retrying",
				zap.String("route", route), zap.String("record_id", id), zap.String("step", rec.op), zap.Int("tries", tries))
		}
		return
	}
}

func (h *Handler) claimLost(route, id, op string) {
	h.logger.Warn("the claim was taken over while the upstream call ran; its outcome was not recorded",
		zap.String("route", route), zap.String("record_id", id), zap.String("step", op))
}

// storedResult is what a completed call leaves for replays.
func storedResult(rt *route, cw *capture, out callResult) store.Result {
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
		if v := gjson.GetBytes(res.Body, rt.ExternalID); v.Exists() && store.ValidExternalID(v.String()) {
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
