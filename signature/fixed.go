package signature

import (
	"crypto/sha256"

	"github.com/idemgate/idemgate/config"
)

// fixedHMAC is the hmac scheme as Shopify and Slack fix it:
//
//   - shopify: X-Shopify-Hmac-Sha256, the base64 HMAC-SHA256 of the
//     body under the app's secret; no timestamp.
//   - slack: X-Slack-Signature, v0= and the hex HMAC-SHA256 of
//     "v0:<X-Slack-Request-Timestamp>:<body>" under the signing secret.
func fixedHMAC(scheme config.SignatureScheme) *hmacScheme {
	s := &hmacScheme{hash: sha256.New, size: sha256.Size}
	switch scheme {
	case config.SchemeShopify:
		s.headerName, s.base64, s.parts = "X-Shopify-Hmac-Sha256", true, []string{"{body}"}
	case config.SchemeSlack:
		s.headerName, s.prefix, s.timestampHeader = "X-Slack-Signature", "v0=", "X-Slack-Request-Timestamp"
		s.parts = []string{"v0:", "{timestamp}", ":", "{body}"}
	}
	return s
}
