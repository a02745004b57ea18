package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The webhook receiver's side of the guarantee: a provider signs its
// events (Standard Webhooks here), delivers them, times out and delivers
// them again; somebody else may post a forged event with a real event id
// first.

// webhookSecret is a Standard Webhooks signing secret (whsec_ and the
// base64 of the HMAC key), the one of the scheme's published example.
const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// rotatedSecret is the secret the sender signs with after a rotation.
const rotatedSecret = "whsec_dGhlIHNlY29uZCBzZWNyZXQgb2YgdGhlIHNlbmRlcg=="

// standardSignature is the webhook-signature value of one signed event,
// computed here from the scheme's definition rather than by the gateway's
// own code: v1 and the base64 HMAC-SHA256, under the secret's decoded
// key, of "id.timestamp.body". The secrets are this file's constants.
func standardSignature(secret, id string, ts int64, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts)
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// webhookHeaders are the headers of a delivery of event id signed with
// secret now.
func webhookHeaders(secret, id string, body []byte) []string {
	ts := time.Now().Unix()
	return []string{
		"Content-Type", "application/json",
		"webhook-id", id,
		"webhook-timestamp", strconv.FormatInt(ts, 10),
		"webhook-signature", standardSignature(secret, id, ts, body),
	}
}

// receiver is a webhook endpoint behind the gateway: it creates one
// payment per event it accepts and counts them by event id. When it
// checks signatures it answers 401 to a delivery it cannot verify under
// the secret it currently knows.
type receiver struct {
	fake
	secret  atomic.Pointer[string] // nil: it checks no signature
	created counter                // payments created, by webhook-id
	calls   counter                // deliveries that reached it, by webhook-id
}

func newReceiver(t testing.TB, secret string) *receiver {
	r := &receiver{}
	if secret != "" {
		r.secret.Store(&secret)
	}
	r.fake = startFake(t, r.serve)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	id := req.Header.Get("webhook-id")
	r.calls.add(id)
	if s := r.secret.Load(); s != nil {
		ts, _ := strconv.ParseInt(req.Header.Get("webhook-timestamp"), 10, 64)
		want := standardSignature(*s, id, ts, body)
		if !strings.Contains(" "+req.Header.Get("webhook-signature")+" ", " "+want+" ") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"bad signature"}`)
			return
		}
	}
	n, _ := r.created.add(id)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"payment":"P-%s-%d"}`, id, n)
}

// deliveredOnce delivers event id to /webhooks three times, as a sender
// retries, signed with secret: each gets 201, and the receiver created
// one payment for it. what names the event in failures.
func (r *receiver) deliveredOnce(t *testing.T, gw *gateway, secret, id string, body []byte, what string) {
	t.Helper()
	for i := range 3 {
		resp := send(t, "POST", gw.url+"/webhooks", body, webhookHeaders(secret, id, body)...)
		if resp.status != http.StatusCreated {
			t.Fatalf("%s, delivery %d: %d %s, want 201", what, i+1, resp.status, resp.body)
		}
	}
	if n := r.created.count(id); n != 1 {
		t.Errorf("%s executed %d times, want 1", what, n)
	}
}

// webhookRoutes guards POST /webhooks, keyed by the event id the sender
// puts in webhook-id; signature adds the route's signature lines.
func webhookRoutes(signature string) string {
	return `routes:
  - name: events
    match: { path: /webhooks }
` + signature
}

// TestWebhookKeySquatting: somebody posts a forged event under a genuine
// event's id before the provider delivers it. The genuine event must
// still execute exactly once.
func TestWebhookKeySquatting(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		t.Parallel()
		forged := []byte(`{"type":"payment.succeeded","data":{"amount":1}}`)
		genuine := []byte(`{"type":"payment.succeeded","data":{"amount":4200}}`)

		t.Run("the receiver checks signatures", func(t *testing.T) {
			recv := newReceiver(t, webhookSecret)
			gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: recv.addr(),
				rules: webhookRoutes("    key: [\"{header.webhook-id}\"]\n")})
			const id = "msg_squat_1"
			r := send(t, "POST", gw.url+"/webhooks", forged, webhookHeaders("whsec_Zm9yZ2VkIGJ5IHNvbWVib2R5IGVsc2U=", id, forged)...)
			if r.status != http.StatusUnauthorized {
				t.Fatalf("forged event: %d %s, want the receiver's 401", r.status, r.body)
			}
			recv.deliveredOnce(t, gw, webhookSecret, id, genuine, "the genuine event after a forged one")
		})

		t.Run("the gateway checks signatures", func(t *testing.T) {
			recv := newReceiver(t, "") // believes whatever reaches it
			store := be.store(t)
			gw := startGateway(t, gatewayConfig{store: store, upstream: recv.addr(),
				env: []string{"WEBHOOK_SECRET=" + webhookSecret},
				rules: webhookRoutes(`    signature:
      scheme: standard-webhooks
      secrets: ["{env.WEBHOOK_SECRET}"]
`)})
			const id = "msg_squat_2"
			for _, h := range [][]string{
				webhookHeaders("whsec_Zm9yZ2VkIGJ5IHNvbWVib2R5IGVsc2U=", id, forged), // another secret
				{"Content-Type", "application/json", "webhook-id", id},               // no signature
				webhookHeaders(webhookSecret, id, genuine),                           // signed, another body
			} {
				r := send(t, "POST", gw.url+"/webhooks", forged, h...)
				if !isProblem(t, r, http.StatusUnauthorized, "signature-invalid", "") {
					t.Fatalf("forged event: %d %s, want 401 signature-invalid", r.status, r.body)
				}
				if p := r.problem(t); strings.Contains(fmt.Sprint(p), "timestamp") || strings.Contains(fmt.Sprint(p), "mismatch") {
					t.Errorf("the problem says which part failed: %s", r.body)
				}
			}
			if n := recv.calls.count(id); n != 0 {
				t.Fatalf("forged events reached the receiver %d times, want 0", n)
			}
			recv.deliveredOnce(t, gw, webhookSecret, id, genuine, "the genuine event")
			for reason, want := range map[string]float64{"mismatch": 2, "missing": 1} {
				if n := metric(t, gw, "idemgate_signature_failures_total", `route="events"`, `reason="`+reason+`"`); n != want {
					t.Errorf("idemgate_signature_failures_total{route=events,reason=%s} = %v, want %v", reason, n, want)
				}
			}
		})
	})
}

// TestWebhookSecretRotation: the receiver refuses every delivery for a
// while after the sender rotated its secret (it still checks the old
// one); once it is fixed, the provider's retries execute the event once.
// A receiver that keeps refusing uses up the route's retry budget and
// its event is held for review, not hammered.
func TestWebhookSecretRotation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		t.Parallel()
		recv := newReceiver(t, webhookSecret)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: recv.addr(),
			rules: webhookRoutes("    key: [\"{header.webhook-id}\"]\n")})
		body := []byte(`{"type":"invoice.paid","data":{"invoice":"in_7"}}`)
		const id = "msg_rotated_1"
		for i := range 3 {
			r := send(t, "POST", gw.url+"/webhooks", body, webhookHeaders(rotatedSecret, id, body)...)
			if r.status != http.StatusUnauthorized {
				t.Fatalf("delivery %d before the fix: %d %s, want the receiver's 401", i+1, r.status, r.body)
			}
		}
		fixed := rotatedSecret
		recv.secret.Store(&fixed)
		recv.deliveredOnce(t, gw, rotatedSecret, id, body, "the event after the fix")

		// A receiver that never accepts: five executions (the default
		// budget) reach it, then the event is held.
		old := webhookSecret
		recv.secret.Store(&old)
		const stuck = "msg_rotated_2"
		var last response
		for range 7 {
			last = send(t, "POST", gw.url+"/webhooks", body, webhookHeaders(rotatedSecret, stuck, body)...)
		}
		if n := recv.calls.count(stuck); n != 5 {
			t.Errorf("a refusing receiver got %d deliveries of one event, want 5 (retry.max_executions)", n)
		}
		if !isProblem(t, last, http.StatusConflict, "retries-exhausted", "") {
			t.Errorf("the 7th delivery to a refusing receiver: %d %s, want 409 retries-exhausted", last.status, last.body)
		}
	})
}

// TestWebhookLateRetry: a retry that arrives after its record expired
// finds the record's tombstone. It is counted and logged, then executes
// (after_expiry: execute, the default) or is refused (reject). A ttl
// shorter than the sender's retry window is a config warning.
func TestWebhookLateRetry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		t.Parallel()
		up := newUpstream(t)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), extra: withSecret(""), rules: `routes:
  - name: late-execute
    match: { path: /late-execute }
    key: ["{header.Idempotency-Key}"]
    sender: stripe
    ttl: 1s
  - name: late-reject
    match: { path: /late-reject }
    key: ["{header.Idempotency-Key}"]
    ttl: 1s
    after_expiry: reject
`})
		if logs := gw.logs.String(); !strings.Contains(logs, "routes.yaml:6: routes[0].ttl") || !strings.Contains(logs, "72h") {
			t.Errorf("no warning naming routes.yaml:6 (the ttl) and stripe's 72h retry window for ttl 1s:\n%s", logs)
		}
		body := []byte(`{"amount":5}`)
		for _, path := range []string{"/late-execute", "/late-reject"} {
			if r := send(t, "POST", gw.url+path, body, "Idempotency-Key", "late-1"); r.status != http.StatusCreated {
				t.Fatalf("%s: %d %s", path, r.status, r.body)
			}
		}
		time.Sleep(1500 * time.Millisecond)

		r := send(t, "POST", gw.url+"/late-execute", body, "Idempotency-Key", "late-1")
		if r.status != http.StatusCreated || up.count("/late-execute") != 2 {
			t.Errorf("late retry under execute: %d, %d executions, want 201 and 2", r.status, up.count("/late-execute"))
		}
		if n := metric(t, gw, "idemgate_late_retries_total", `route="late-execute"`); n != 1 {
			t.Errorf("idemgate_late_retries_total{route=late-execute} = %v, want 1", n)
		}
		if id := recordID("late-execute", "", "late-1"); !strings.Contains(gw.logs.String(), id) {
			t.Errorf("no log line names the late retry's record %s", id)
		}

		r = send(t, "POST", gw.url+"/late-reject", body, "Idempotency-Key", "late-1")
		if !isProblem(t, r, http.StatusConflict, "expired", "") || up.count("/late-reject") != 1 {
			t.Errorf("late retry under reject: %d %s, %d executions; want 409 expired and 1", r.status, r.body, up.count("/late-reject"))
		}
		if n := metric(t, gw, "idemgate_late_retries_total", `route="late-reject"`); n != 1 {
			t.Errorf("idemgate_late_retries_total{route=late-reject} = %v, want 1", n)
		}
	})
}

// TestSamePayloadNewKey: a sender that mints a new event id for every
// emission sends one payload under two keys. Within the window the second
// is flagged, and warned about, held or refused as the route says.
func TestSamePayloadNewKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		t.Parallel()
		up := newUpstream(t)
		var rules strings.Builder
		rules.WriteString("routes:\n")
		for _, action := range []string{"warn", "hold", "reject"} {
			fmt.Fprintf(&rules, `  - name: same-%[1]s
    match: { path: /same-%[1]s }
    key: ["{header.Idempotency-Key}"]
    same_payload_window: 1h
    on_same_payload: %[1]s
`, action)
		}
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), extra: withSecret(""), rules: rules.String()})
		body := []byte(`{"order":"o-1","amount":30}`)
		for _, action := range []string{"warn", "hold", "reject"} {
			route, path := "same-"+action, "/same-"+action
			first, second := recordID(route, "", "k1"), recordID(route, "", "k2")
			if r := send(t, "POST", gw.url+path, body, "Idempotency-Key", "k1"); r.status != http.StatusCreated {
				t.Fatalf("%s: first key: %d %s", route, r.status, r.body)
			}
			if r := send(t, "POST", gw.url+path, body, "Idempotency-Key", "k1"); r.status != http.StatusCreated || up.count(path) != 1 {
				t.Fatalf("%s: a retry of the first key: %d, %d executions; want its replay", route, r.status, up.count(path))
			}
			r := send(t, "POST", gw.url+path, body, "Idempotency-Key", "k2")
			switch action {
			case "warn":
				if r.status != http.StatusCreated || up.count(path) != 2 {
					t.Errorf("%s: %d, %d executions; want 201 and 2", route, r.status, up.count(path))
				}
			case "hold":
				if !isProblem(t, r, http.StatusConflict, "same-payload", second) || up.count(path) != 1 {
					t.Errorf("%s: %d %s, %d executions; want 409 same-payload naming %s, and 1", route, r.status, r.body, up.count(path), second)
				}
				var rec adminRecord
				adminJSON(t, gw, "GET", "/idempotency/records/"+second, "", &rec)
				if rec.State != "outcome_unknown" || rec.Reason != "same_payload" {
					t.Errorf("%s: the held record is %s/%s, want outcome_unknown/same_payload", route, rec.State, rec.Reason)
				}
			case "reject":
				if !isProblem(t, r, http.StatusConflict, "same-payload", "") || up.count(path) != 1 {
					t.Errorf("%s: %d %s, %d executions; want 409 same-payload and 1", route, r.status, r.body, up.count(path))
				}
			}
			if n := metric(t, gw, "idemgate_same_payload_total", `route="`+route+`"`); n != 1 {
				t.Errorf("idemgate_same_payload_total{route=%s} = %v, want 1", route, n)
			}
			if logs := gw.logs.String(); !strings.Contains(logs, first) || !strings.Contains(logs, second) {
				t.Errorf("%s: no log line names both records %s and %s", route, first, second)
			}
		}
	})
}

// TestExampleSignedWebhook runs examples/webhook/signed.yaml as written,
// in the middle of a rotation: the sender signs with its new secret, some
// deliveries still carry the old one.
func TestExampleSignedWebhook(t *testing.T) {
	t.Parallel()
	rules, err := os.ReadFile(filepath.Join("..", "examples", "webhook", "signed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	recv := newReceiver(t, "")
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: recv.addr(), rules: string(rules),
		env: []string{"WEBHOOK_SECRET=" + rotatedSecret, "WEBHOOK_SECRET_PREVIOUS=" + webhookSecret}})
	body := []byte(`{"type":"payment.succeeded","data":{"amount":4200}}`)
	const id = "msg_2Lh9KqKb1Y"
	for i, secret := range []string{webhookSecret, rotatedSecret, rotatedSecret} {
		r := send(t, "POST", gw.url+"/webhooks/payments", body, webhookHeaders(secret, id, body)...)
		if r.status != http.StatusCreated {
			t.Fatalf("delivery %d: %d %s, want 201", i+1, r.status, r.body)
		}
		if replayed := r.header.Get("Idempotent-Replayed") == "true"; replayed != (i > 0) {
			t.Errorf("delivery %d: Idempotent-Replayed %v", i+1, replayed)
		}
	}
	r := send(t, "POST", gw.url+"/webhooks/payments", body, webhookHeaders("whsec_Zm9yZ2VkIGJ5IHNvbWVib2R5IGVsc2U=", "msg_forged", body)...)
	if !isProblem(t, r, http.StatusUnauthorized, "signature-invalid", "") {
		t.Errorf("a forged delivery: %d %s, want 401 signature-invalid", r.status, r.body)
	}
	if n, all := recv.created.count(id), recv.created.sum(); n != 1 || all != 1 {
		t.Errorf("the receiver created %d payments for the event, %d in all; want 1 and 1", n, all)
	}
}
