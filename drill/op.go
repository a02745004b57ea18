package drill

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/idemgate/idemgate/keying"
)

// operation is one logical operation of a scenario: the request the
// drill file's template gives for one {n}, its idempotency key and the
// id of its record.
type operation struct {
	tag    string // {run}-{n}, the proxy's name for it
	n      int
	method string
	target string // path and query
	header http.Header
	body   []byte
	key    string
	id     string // record id: what the admin API finds the record by
}

// newRun returns a run id: short, new for every run.
func newRun() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("0102-1504") + "-" + hex.EncodeToString(b[:])
}

// expand fills in {run}, {n} and {env.NAME}.
func (d *drill) expand(s string, n int) string {
	s = strings.ReplaceAll(s, "{run}", d.run)
	s = strings.ReplaceAll(s, "{n}", strconv.Itoa(n))
	return keying.ExpandEnv(s)
}

// newOp makes the scenario's next operation, with its key and record id
// derived as the gateway derives them.
func (d *drill) newOp(r *Result) (*operation, error) {
	d.n++
	rq := &d.file.Request
	op := &operation{n: d.n, tag: d.run + "-" + strconv.Itoa(d.n), method: strings.ToUpper(rq.Method),
		target: d.expand(rq.Path, d.n), header: http.Header{}, body: []byte(d.expand(rq.Body, d.n))}
	for name, v := range rq.Headers {
		op.header.Set(name, d.expand(v, d.n))
	}
	u, err := url.Parse(op.target)
	if err != nil {
		return nil, fmt.Errorf("request.path gives %q, not a path: %v", op.target, err)
	}
	in := keying.NewInput(op.method, op.header, u.RawQuery, op.body)
	key, _, err := keying.DeriveKey(d.route.Key, in)
	switch {
	case err != nil:
		return nil, fmt.Errorf("route %s: %v", d.route.Name, err)
	case key == "":
		return nil, fmt.Errorf("route %s's key templates give no key for the drill file's request", d.route.Name)
	}
	op.key = key
	op.id = d.ids.KeyID(d.route.Operation, keying.ScopeHash(d.route.Scope, in), key)
	d.mu.Lock()
	d.byTag[op.tag] = r
	d.mu.Unlock()
	r.Operations++
	return op, nil
}

// mutated returns op's body changed by m.
func (d *drill) mutated(op *operation, m *Mutation) ([]byte, error) {
	if m.Body != "" {
		return []byte(d.expand(m.Body, op.n)), nil
	}
	body := op.body
	for path, v := range m.Set {
		var err error
		if json.Valid([]byte(v)) {
			body, err = sjson.SetRawBytes(body, path, []byte(v))
		} else {
			body, err = sjson.SetBytes(body, path, v)
		}
		if err != nil {
			return nil, fmt.Errorf("setting %s in the request body: %v", path, err)
		}
	}
	return body, nil
}

// answer is what the gateway answered one request.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// kind names an answer: "error" (no answer), "replay", a problem type of
// the gateway ("in-flight", "outcome-unknown", "key-reused",
// "breaker-open", "retries-exhausted", ...), or "upstream".
func (a answer) kind() string {
	switch {
	case a.err != nil:
		return "error"
	case a.header.Get("Idempotent-Replayed") == "true":
		return "replay"
	}
	if mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); mt == "application/problem+json" {
		if t := gjson.GetBytes(a.body, "type").String(); strings.Contains(t, "#") {
			return t[strings.LastIndex(t, "#")+1:]
		}
	}
	return "upstream"
}

func (a answer) ok() bool { return a.err == nil && a.status >= 200 && a.status < 300 }

// String is the answer for a timeline: status and kind, never the body.
func (a answer) String() string {
	if a.err != nil {
		return "no answer (" + errText(a.err) + ")"
	}
	s := strconv.Itoa(a.status) + " " + http.StatusText(a.status)
	switch k := a.kind(); k {
	case "upstream":
	case "replay":
		s += ", a replay (Idempotent-Replayed)"
	default:
		s += ", problem " + k
	}
	return s
}

// send sends op (with body, or op's own when nil) to the drill's gateway
// and notes it on r's timeline.
func (d *drill) send(r *Result, op *operation, body []byte, what string) answer {
	if body == nil {
		body = op.body
	}
	r.Attempts++
	req, err := http.NewRequest(op.method, d.gw.url+op.target, bytes.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header = op.header.Clone()
	req.Header.Set(opHeader, op.tag)
	resp, err := d.client.Do(req)
	var a answer
	if err != nil {
		a = answer{err: err}
	} else {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		resp.Body.Close()
		a = answer{status: resp.StatusCode, header: resp.Header, body: b, err: rerr}
	}
	d.note(r, fmt.Sprintf("#%d %s: %s", op.n, what, a))
	return a
}

// records counts op's business records: with the drill file's count
// request, or from the upstream's 2xx answers through the proxy.
func (d *drill) records(r *Result, op *operation) (int, error) {
	seen := d.proxy.countsOf(op.tag).OK
	c := d.file.Count
	if c == nil {
		d.note(r, fmt.Sprintf("#%d records: %d (the upstream's 2xx answers through the proxy)", op.n, seen))
		return seen, nil
	}
	u := strings.ReplaceAll(keying.ExpandEnv(c.URL), "{key}", url.QueryEscape(op.key))
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	for name, v := range c.Headers {
		req.Header.Set(name, keying.ExpandEnv(v))
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("the count request: %s", errText(err))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	if err != nil {
		return 0, fmt.Errorf("the count request: %s", errText(err))
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("the count request answered %s", resp.Status)
	}
	v := gjson.GetBytes(b, c.Path)
	if v.Type != gjson.Number || v.Num != float64(int(v.Num)) || v.Num < 0 {
		return 0, fmt.Errorf("the count request's answer has no whole number at %q", c.Path)
	}
	n := int(v.Num)
	d.note(r, fmt.Sprintf("#%d records: %d (count request)", op.n, n))
	if n < seen {
		r.fail("#%d: the count request says %d records, but the upstream answered 2xx %s to this operation through the proxy: the count cannot be trusted", op.n, n, times(seen))
	}
	return n, nil
}

// state reads op's record from the admin API and notes its state; "none"
// when there is no record.
func (d *drill) state(r *Result, op *operation) (*record, error) {
	rec, err := d.gw.record(op.id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		d.note(r, fmt.Sprintf("#%d admin API: no record for its key", op.n))
		return nil, nil
	}
	d.note(r, fmt.Sprintf("#%d admin API: record %s… %s (attempts %d, executions %d)", op.n, rec.ID[:8], describeState(rec), rec.Attempts, rec.Executions))
	return rec, nil
}

func describeState(rec *record) string {
	if rec == nil {
		return "none"
	}
	if rec.Reason != "" && rec.State != "completed" || rec.Reason == "verified" {
		return rec.State + " (" + rec.Reason + ")"
	}
	return rec.State
}

// waitState polls op's record until want(rec) or limit passes.
func (d *drill) waitState(op *operation, limit time.Duration, want func(*record) bool) (*record, error) {
	deadline := time.Now().Add(limit)
	for {
		rec, err := d.gw.record(op.id)
		if err != nil || want(rec) || time.Now().After(deadline) {
			return rec, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// times is "once", "twice" or "n times".
func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return strconv.Itoa(n) + " times"
}
