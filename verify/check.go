package verify

import (
	"errors"
	"unicode/utf8"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// ResolveCheck resolves a route's verify rule from one request, for the
// claim to keep on the record: the lookup's URL and the values of
// found.match. It is zero when a placeholder is empty (a lookup for ""
// would find the wrong thing), or a match value is too long or not
// UTF-8: such a record is held for an operator as without verify. part
// names what could not be resolved ("url", "found.match"), and err is
// nil when it was an empty placeholder.
func ResolveCheck(v *config.VerifyRule, key, id string, in *keying.Input) (chk store.Check, part string, err error) {
	u, ok, err := v.URL.Resolve(key, id, in)
	if err != nil || !ok {
		return store.Check{}, "url", err
	}
	chk = store.Check{Method: v.Method, URL: u, After: v.After}
	for _, m := range v.FoundMatch {
		val, ok, err := m.Value.ResolveText(key, id, in)
		if err != nil || !ok {
			return store.Check{}, "found.match", err
		}
		if len(val) > store.MaxCheckMatchValue || !utf8.ValidString(val) {
			return store.Check{}, "found.match", errors.New("too long or not UTF-8")
		}
		chk.Match = append(chk.Match, store.CheckMatch{Path: m.Path, Value: val})
	}
	return chk, "", nil
}
