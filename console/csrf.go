package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// A form's csrf_token is "<unix seconds>.<mac>", the mac being
// HMAC-SHA-256 under the console's key of the issue time and the actor
// the page was made for. Another site cannot read the console's pages
// (the same-origin policy), so it cannot learn a token; the token of one
// user is worthless to another; and a token expires after csrfLifetime.
// There is no server-side session to keep: any gateway with the same key
// checks it. The POST is also refused when the browser says it comes from
// another origin (Sec-Fetch-Site, or Origin against Host).

// csrfLifetime is how long a page's forms stay valid.
const csrfLifetime = 12 * time.Hour

// csrfSkew tolerates clocks of gateways that share a key being a little
// apart.
const csrfSkew = time.Minute

// csrfField is the forms' hidden field.
const csrfField = "csrf_token"

var (
	errNoToken  = errors.New("the form carries no csrf_token")
	errBadToken = errors.New("the form's csrf_token is not valid here")
	errOldToken = errors.New("the form's csrf_token has expired")
)

func (c *Console) csrfMAC(issued, actor string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("idemgate console csrf\x00"))
	m.Write([]byte(issued))
	m.Write([]byte{0})
	m.Write([]byte(actor))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfToken returns the token for forms shown to actor at now.
func (c *Console) csrfToken(actor string, now time.Time) string {
	issued := strconv.FormatInt(now.Unix(), 10)
	return issued + "." + c.csrfMAC(issued, actor)
}

// checkCSRF verifies a token submitted by actor at now.
func (c *Console) checkCSRF(token, actor string, now time.Time) error {
	if token == "" {
		return errNoToken
	}
	issued, mac, ok := strings.Cut(token, ".")
	if !ok {
		return errBadToken
	}
	if !hmac.Equal([]byte(mac), []byte(c.csrfMAC(issued, actor))) {
		return errBadToken
	}
	sec, err := strconv.ParseInt(issued, 10, 64)
	if err != nil {
		return errBadToken
	}
	at := time.Unix(sec, 0)
	if now.Sub(at) > csrfLifetime || at.Sub(now) > csrfSkew {
		return errOldToken
	}
	return nil
}
