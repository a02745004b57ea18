package keying

// Headers returns the canonical names of the request headers the
// template reads ({header.NAME}), in order, each once.
func (t Template) Headers() []string {
	var out []string
	for _, p := range t.parts {
		if p.src != srcHeader {
			continue
		}
		seen := false
		for _, h := range out {
			seen = seen || h == p.text
		}
		if !seen {
			out = append(out, p.text)
		}
	}
	return out
}
