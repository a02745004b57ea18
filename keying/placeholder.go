package keying

// Placeholder is one request placeholder of the kinds templates use:
// {header.NAME}, {query.NAME}, {form.NAME} or {body.PATH}. Other templates
// built on request values (a route's verification URL) parse theirs with
// ParsePlaceholder and read them from the same Input, so a value means the
// same wherever it is used. A Placeholder is immutable and safe for
// concurrent use.
type Placeholder struct{ p part }

// ParsePlaceholder parses the text between a placeholder's braces, such as
// "header.Idempotency-Key" or "body.event.id", as ParseTemplate does.
func ParsePlaceholder(s string) (Placeholder, error) {
	p, err := parsePlaceholder(s)
	if err != nil {
		return Placeholder{}, err
	}
	return Placeholder{p}, nil
}

// Value returns the placeholder's value in the request: what a template
// would put in its place ("" when absent). It fails only for a {body.*}
// placeholder when the body is not valid JSON.
func (p Placeholder) Value(in *Input) (string, error) { return in.lookup(p.p) }

// NeedsBody reports whether the placeholder reads the request body.
func (p Placeholder) NeedsBody() bool { return p.p.src == srcBody || p.p.src == srcForm }
