package verify

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/tidwall/gjson"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// lookupClient makes the Verifier's lookups: its own connections, no
// cookies, and no redirects (a 3xx is an answer like any other, and
// configured headers never follow a redirect elsewhere). One for the
// process: a reload does not leave a connection pool behind.
var lookupClient = &http.Client{
	Transport: http.DefaultTransport.(*http.Transport).Clone(),
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// lookup asks the upstream once, within the rule's timeout, and judges
// the answer. note says why a check failed, without the URL (it holds
// the key) or any header.
func (v *Verifier) lookup(rt *config.Resolved, chk store.Check) (store.CheckEntry, store.Result, string) {
	rule := rt.Verify
	fail := func(note string) (store.CheckEntry, store.Result, string) {
		return store.CheckEntry{Verdict: store.VerdictError}, store.Result{}, note
	}
	if chk.IsZero() {
		return fail("the record carries no check")
	}
	target := keying.ExpandEnv(chk.URL)
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail("the check URL is not an absolute http or https URL once {env.*} is filled in (is the variable set?)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), rule.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, chk.Method, u.String(), nil)
	if err != nil {
		return fail("the check request cannot be made")
	}
	for _, hd := range rule.Headers {
		req.Header.Set(hd.Name, keying.ExpandEnv(hd.Value))
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return fail(lookupError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, rt.MaxResponse+1))
	entry := store.CheckEntry{Status: resp.StatusCode, Verdict: store.VerdictInconclusive}
	switch {
	case err != nil:
		entry.Verdict = store.VerdictError
		return entry, store.Result{}, "reading the answer: " + lookupError(err)
	case int64(len(body)) > rt.MaxResponse:
		return entry, store.Result{}, "the answer is larger than max_response"
	case rule.NotFound(resp.StatusCode):
		entry.Verdict = store.VerdictNotApplied
		return entry, store.Result{}, ""
	case !rule.Found(resp.StatusCode):
		return entry, store.Result{}, ""
	case keying.CheckDepth(body) != nil || !gjson.ValidBytes(body):
		return entry, store.Result{}, "the answer is not JSON"
	}
	verdict, res, note := judge(rule, chk, body)
	if entry.Verdict = verdict; entry.Verdict != store.VerdictApplied {
		return entry, store.Result{}, note
	}
	res.Status = cmp.Or(rule.ReplayStatus, resp.StatusCode)
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		res.Header = http.Header{"Content-Type": {ct}}
	}
	return entry, res, ""
}

// judge reads a lookup's answer with a found status, JSON within its
// depth limit: not applied when nothing is at found.id; inconclusive when
// its top level is an array of more than one element (a lookup that
// ignored its filter lists everything), when a match value differs or
// is missing (an answer about another operation), or when nothing is at
// found.object; otherwise applied, with the value at found.object (or
// the whole answer) as the result's body and the value at found.id as
// its external id.
func judge(v *config.VerifyRule, chk store.Check, body []byte) (string, store.Result, string) {
	n := 0
	if top := gjson.ParseBytes(body); top.IsArray() {
		top.ForEach(func(_, _ gjson.Result) bool { n++; return n < 2 })
	}
	if n > 1 {
		return store.VerdictInconclusive, store.Result{}, "the answer lists more than one object"
	}
	found := gjson.GetBytes(body, v.FoundID)
	if !found.Exists() || found.Type == gjson.Null || found.String() == "" {
		return store.VerdictNotApplied, store.Result{}, ""
	}
	for _, m := range chk.Match {
		got := gjson.GetBytes(body, m.Path)
		if m.Path == "" || !got.Exists() || got.Type == gjson.Null || got.IsObject() || got.IsArray() || got.String() != m.Value {
			return store.VerdictInconclusive, store.Result{}, "the answer is about another operation (a found.match value differs)"
		}
	}
	if !store.ValidExternalID(found.String()) {
		return store.VerdictInconclusive, store.Result{}, "the external id in the answer is too long or holds control characters"
	}
	res := store.Result{Body: body, ExternalID: found.String()}
	if v.FoundObject != "" {
		obj := gjson.GetBytes(body, v.FoundObject)
		if !obj.Exists() || obj.Type == gjson.Null {
			return store.VerdictInconclusive, store.Result{}, "nothing at found.object in the answer"
		}
		res.Body = []byte(obj.Raw)
	}
	return store.VerdictApplied, res, ""
}

// lookupError describes a failed lookup without its URL.
func lookupError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &op):
		return op.Op + ": " + op.Err.Error()
	}
	return err.Error()
}
