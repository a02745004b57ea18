package console

import (
	"strings"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
)

// maxShownBody bounds the stored body text put on a page.
const maxShownBody = 64 << 10

// bodyView is a stored response body as shown on a record's page.
type bodyView struct {
	Size        int
	ContentType string
	Omitted     bool   // not stored: larger than max_response
	Text        string // what is shown ("" for binary, unparsed and empty bodies)
	Binary      bool
	// Unparsed is the size and digest of a body that cannot be redacted
	// field by field (XML, multipart, other text, bytes), shown instead
	// of it unless the route sets show_unparsed_bodies.
	Unparsed   string
	JSON       bool // laid out from JSON or NDJSON, credentials redacted
	Form       bool // a URL-encoded form, credentials redacted
	Redactions int
	Truncated  bool
}

// showBody prepares rec's stored body for the page with the operator
// service's redaction (red, the record's route's): JSON (whatever its
// Content-Type) is laid out two spaces per level, NDJSON a value a line,
// and URL-encoded forms kept as they are, with the values of
// credential-like fields replaced; anything else only by size and digest,
// or, where the route sets show_unparsed_bodies, text as it is and binary
// bodies by size; at most maxShownBody bytes.
func showBody(rec *store.Record, red operator.Redactor) bodyView {
	v := bodyView{Size: len(rec.Body), Omitted: rec.BodyOmitted, ContentType: rec.Header.Get("Content-Type")}
	shown := red.Body(rec.Body, v.ContentType, "  ")
	switch shown.Kind {
	case operator.BodyEmpty:
		return v
	case operator.BodyBinary:
		v.Binary = true
		return v
	case operator.BodyUnparsed:
		v.Unparsed = shown.Text
		return v
	}
	v.JSON, v.Form, v.Redactions = shown.Kind == operator.BodyJSON || shown.Kind == operator.BodyNDJSON, shown.Kind == operator.BodyForm, shown.Redactions
	text := shown.Text
	if len(text) > maxShownBody {
		text, v.Truncated = strings.ToValidUTF8(text[:maxShownBody], ""), true
	}
	v.Text = text
	return v
}
