package signature

import (
	"errors"
	"fmt"
	"strings"
)

// MinSecretLen is the shortest signature secret accepted, in bytes after
// decoding: the key a Standard Webhooks secret's base64 gives, what
// follows Stripe's whsec_, the secret itself for the other schemes. A
// shorter one (whsec_ alone, one byte, a space) is a config error, not a
// secret anyone could rely on.
const MinSecretLen = 16

// checkStrength refuses a resolved secret that cannot be a real one:
// blank, or under MinSecretLen bytes once decoded (key is what the
// scheme made of it). The error never quotes the secret.
func checkStrength(s scheme, secret string, key []byte) error {
	n, what := len(key), ""
	if _, ok := s.(stripe); ok {
		n, what = len(strings.TrimPrefix(secret, "whsec_")), " after whsec_"
	} else if _, ok := s.(standardWebhooks); ok {
		what = " once decoded"
	}
	switch {
	case strings.TrimSpace(secret) == "":
		return errors.New("is blank: set the sender's signing secret")
	case n < MinSecretLen:
		return fmt.Errorf("is %d bytes%s, at least %d needed: set the sender's whole signing secret", n, what, MinSecretLen)
	}
	return nil
}
