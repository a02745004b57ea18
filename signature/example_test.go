package signature_test

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/signature"
)

// A handler builds a route's verifier when it provisions, filling the
// secrets' placeholders with Caddy's replacer ({env.NAME}, {file.PATH}),
// and verifies each request before it claims anything. The request here
// is the Standard Webhooks libraries' published vector.
func ExampleNew() {
	rule := config.SignatureRule{
		Scheme:    config.SchemeStandardWebhooks,
		Tolerance: 5 * time.Minute,
		Senders:   []config.SignatureSender{{Name: "default", Secrets: []string{"{env.EXAMPLE_WHSEC}"}}},
	}
	os.Setenv("EXAMPLE_WHSEC", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") // as the deployment would
	repl := caddy.NewReplacer()
	v, err := signature.New(rule, func(tmpl string) (string, error) { return repl.ReplaceOrErr(tmpl, true, true) })
	if err != nil {
		fmt.Println(err)
		return
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)

	fmt.Println(v.CheckSignature(h, body, time.Unix(1614265330, 0)))
	fmt.Println(v.CheckSignature(h, []byte(`{"test": 1}`), time.Unix(1614265330, 0)))
	fmt.Println(v.CheckSignature(h, body, time.Unix(1614265330, 0).Add(time.Hour)))
	h.Del("webhook-signature")
	fmt.Println(v.CheckSignature(h, body, time.Unix(1614265330, 0)))
	// Output:
	// standard-webhooks:default  true
	//  mismatch false
	//  timestamp false
	//  missing false
}
