package signature

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/signature/senders"
)

// sdkVectors is testdata/vectors.json, made by testdata/sdk/make-vectors.mjs
// with each sender's own SDK.
type sdkVectors struct {
	SDKVersions map[string]string `json:"sdk_versions"`
	Vectors     []struct {
		Sender   string            `json:"sender"`
		Case     string            `json:"case"`
		Secret   string            `json:"secret"`
		Headers  map[string]string `json:"headers"`
		Body     string            `json:"body"`
		URL      string            `json:"url"`
		Now      int64             `json:"now"`
		SDKValid bool              `json:"sdk_valid"`
		Want     bool              `json:"want"`
		Note     string            `json:"note"`
	} `json:"vectors"`
}

// presetVerifier is the verifier of a route that names sender and gives
// secret, resolved by config as a rules file would be.
func presetVerifier(t *testing.T, sender, secret string) *Verifier {
	t.Helper()
	r := config.Rules{Routes: []config.Route{{Name: "r", Match: config.Match{Path: "/r"}, Sender: sender,
		Signature: &config.Signature{Secrets: []string{"{env.SECRET}"}}}}}
	res, err := r.Resolve(config.Limits{})
	if err != nil {
		t.Fatalf("%s: %v", sender, err)
	}
	return newVerifier(t, *res[0].Signature, env{"{env.SECRET}": secret})
}

// TestSenderVectors runs every vector each sender's SDK made through the
// verifier of a route that names the sender: the gateway's verdict is
// the SDK's, but where a note says why not (a timestamp from the future,
// which the gateway refuses and some SDKs accept). Every preset has a
// genuine delivery, one under a wrong secret and one with a changed
// body, and a stale and a future one where the sender signs a time.
func TestSenderVectors(t *testing.T) {
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs sdkVectors
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{}
	for _, v := range vs.Vectors {
		ver := presetVerifier(t, v.Sender, v.Secret)
		h := http.Header{}
		for k, val := range v.Headers {
			h.Set(k, val)
		}
		sender, reason, ok := ver.CheckSignatureURL(h, v.URL, []byte(v.Body), time.Unix(v.Now, 0))
		if ok != v.Want {
			t.Errorf("%s, %s: verified %v (%q %q), want %v (the SDK: %v)", v.Sender, v.Case, ok, sender, reason, v.Want, v.SDKValid)
		}
		if v.Want != v.SDKValid && v.Note == "" {
			t.Errorf("%s, %s: the gateway's verdict differs from the SDK's without a note", v.Sender, v.Case)
		}
		cases[v.Sender] = append(cases[v.Sender], v.Case)
	}
	for _, p := range senders.All() {
		want := []string{"genuine", "wrong secret", "changed body"}
		if p.Tolerance > 0 {
			want = append(want, "stale timestamp", "future timestamp")
		}
		for _, c := range want {
			if !slices.Contains(cases[p.Name], c) {
				t.Errorf("%s: no %q vector from its SDK", p.Name, c)
			}
		}
	}
	if len(vs.SDKVersions) < 9 {
		t.Errorf("the vectors name %d SDK versions, want 9", len(vs.SDKVersions))
	}
}

// TestSenderPublishedExamples: the published examples of GitHub, Slack
// and Standard Webhooks verify on routes that name their sender.
func TestSenderPublishedExamples(t *testing.T) {
	for _, tt := range []struct {
		sender, secret, body string
		headers              []string
		now                  int64
	}{
		{"github", githubSecret, githubBody, []string{"X-Hub-Signature-256", githubSig}, 0},
		{"slack", slackSecret, slackBody, []string{"X-Slack-Signature", slackSig, "X-Slack-Request-Timestamp", slackTime}, 1531420618},
		{"standard-webhooks", swSecret, swBody, []string{"webhook-id", swMsgID, "webhook-timestamp", swTime, "webhook-signature", swSig}, 1614265330},
		{"svix", swSecret, swBody, []string{"webhook-id", swMsgID, "webhook-timestamp", swTime, "webhook-signature", swSig}, 1614265330},
	} {
		v := presetVerifier(t, tt.sender, tt.secret)
		h := http.Header{}
		for i := 0; i < len(tt.headers); i += 2 {
			h.Set(tt.headers[i], tt.headers[i+1])
		}
		if _, reason, ok := v.CheckSignature(h, []byte(tt.body), time.Unix(tt.now, 0)); !ok {
			t.Errorf("%s's published example: %s", tt.sender, reason)
		}
		if _, _, ok := v.CheckSignature(h, []byte(tt.body+" "), time.Unix(tt.now, 0)); ok {
			t.Errorf("%s's published example verifies with a changed body", tt.sender)
		}
	}
}
