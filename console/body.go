package console

import (
	"encoding/json"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/idemgate/idemgate/store"
)

// maxShownBody bounds the stored body text put on a page.
const maxShownBody = 64 << 10

// maxJSONDepth is the deepest JSON nesting laid out member by member;
// deeper values are not shown (they could hide credentials).
const maxJSONDepth = 32

// bodyView is a stored response body as shown on a record's page.
type bodyView struct {
	Size        int
	ContentType string
	Omitted     bool   // not stored: larger than max_response
	Text        string // what is shown ("" for binary and empty bodies)
	Binary      bool
	JSON        bool // laid out from JSON, credentials redacted
	Redactions  int
	Truncated   bool
}

// showBody prepares rec's stored body for the page: JSON is laid out with
// the values of credential-like members replaced, other text is shown as
// it is, binary bodies only by size; at most maxShownBody bytes.
func showBody(rec *store.Record) bodyView {
	v := bodyView{Size: len(rec.Body), Omitted: rec.BodyOmitted}
	if ct := rec.Header.Get("Content-Type"); ct != "" {
		v.ContentType = ct
	}
	if len(rec.Body) == 0 {
		return v
	}
	if !utf8.Valid(rec.Body) {
		v.Binary = true
		return v
	}
	text := string(rec.Body)
	if isJSONType(v.ContentType) && json.Valid(rec.Body) {
		var sb strings.Builder
		writeJSON(&sb, gjson.ParseBytes(rec.Body), 0, &v.Redactions)
		text, v.JSON = sb.String(), true
	}
	if len(text) > maxShownBody {
		text, v.Truncated = strings.ToValidUTF8(text[:maxShownBody], ""), true
	}
	v.Text = text
	return v
}

func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// writeJSON lays out a valid JSON value two spaces per level, members in
// their order, the values of sensitive members replaced (counted in n).
func writeJSON(sb *strings.Builder, v gjson.Result, depth int, n *int) {
	open, close := "", ""
	switch {
	case v.IsObject():
		open, close = "{", "}"
	case v.IsArray():
		open, close = "[", "]"
	default:
		sb.WriteString(v.Raw)
		return
	}
	if depth >= maxJSONDepth {
		sb.WriteString(`"(nested too deeply to show)"`)
		return
	}
	sb.WriteString(open)
	first := true
	v.ForEach(func(key, val gjson.Result) bool {
		if !first {
			sb.WriteByte(',')
		}
		first = false
		sb.WriteByte('\n')
		sb.WriteString(strings.Repeat("  ", depth+1))
		if open == "{" {
			sb.WriteString(key.Raw)
			sb.WriteString(": ")
			if sensitiveName(key.String()) {
				sb.WriteString(`"` + store.Redacted + `"`)
				*n++
				return true
			}
		}
		writeJSON(sb, val, depth+1, n)
		return true
	})
	if !first {
		sb.WriteByte('\n')
		sb.WriteString(strings.Repeat("  ", depth))
	}
	sb.WriteString(close)
}
