package console

import (
	"strings"

	"github.com/idemgate/idemgate/store"
)

// maxShownBody bounds the stored body text put on a page.
const maxShownBody = 64 << 10

// bodyView is a stored response body as shown on a record's page.
type bodyView struct {
	Size        int
	ContentType string
	Omitted     bool   // not stored: larger than max_response
	Text        string // what is shown ("" for binary and empty bodies)
	Binary      bool
	JSON        bool // laid out from JSON, credentials redacted
	Form        bool // a URL-encoded form, credentials redacted
	Redactions  int
	Truncated   bool
}

// showBody prepares rec's stored body for the page with the operator
// service's redaction (red, the record's route's): JSON (whatever its
// Content-Type) is laid out two spaces per level and URL-encoded forms
// kept as they are, with the values of credential-like fields replaced;
// other text is shown as it is, binary bodies only by size; at most
// maxShownBody bytes.
func showBody(rec *store.Record, red store.Redactor) bodyView {
	v := bodyView{Size: len(rec.Body), Omitted: rec.BodyOmitted, ContentType: rec.Header.Get("Content-Type")}
	shown := red.Body(rec.Body, v.ContentType, "  ")
	switch shown.Kind {
	case store.BodyEmpty:
		return v
	case store.BodyBinary:
		v.Binary = true
		return v
	}
	v.JSON, v.Form, v.Redactions = shown.Kind == store.BodyJSON, shown.Kind == store.BodyForm, shown.Redactions
	text := shown.Text
	if len(text) > maxShownBody {
		text, v.Truncated = strings.ToValidUTF8(text[:maxShownBody], ""), true
	}
	v.Text = text
	return v
}
