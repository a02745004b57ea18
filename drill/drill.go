package drill

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
)

// Exit statuses of `idemgate drill`.
const (
	ExitHeld   = 0 // every scenario held
	ExitFailed = 1 // a scenario did not hold: more records than expected, a count that cannot be trusted, a wrong answer
	ExitCannot = 2 // the drill could not run
	// ExitInterrupted: SIGINT or SIGTERM ended the drill (128 + SIGINT,
	// as a shell reports a Ctrl-C).
	ExitInterrupted = 130
	maxScenario     = 2 * time.Minute
)

// Options are the command line of `idemgate drill`.
type Options struct {
	File    string    // the drill file
	Gateway string    // the idemgate binary the drill's gateway runs
	Yes     bool      // run without asking
	JSON    string    // write the JSON report here
	HTML    string    // write the HTML report here
	Stdin   io.Reader // where the confirmation is read
	IsTTY   bool      // Stdin is a terminal
	Out     io.Writer // the plan and the report
	Err     io.Writer // progress and errors
	// Interrupt delivers SIGINT and SIGTERM (signal.Notify): the drill
	// then stops its gateway and fault proxy, removes its temporary
	// files, prints what it had done and returns ExitInterrupted. nil:
	// the drill is not interrupted.
	Interrupt <-chan os.Signal
}

// drill is one run.
type drill struct {
	opts   Options
	file   *File
	route  config.Resolved
	run    string
	secret string
	ids    *keying.IDKey
	gw     *gateway
	proxy  *proxy
	client *http.Client
	start  time.Time

	mu    sync.Mutex
	n     int                // the last operation's {n}
	byTag map[string]*Result // operation tag → its scenario's result
	// What an interrupt tears down and reports, under mu: the temporary
	// directory ("" once removed), the report so far and the scenario
	// that is running.
	dir     string
	rep     *Report
	running string
	// stopped is set by an interrupt: the scenarios still running in the
	// background start nothing more and print nothing more.
	stopped atomic.Bool
}

// Run runs the drill the options name and returns its exit status.
func Run(o Options) int {
	f, err := Load(o.File)
	if err != nil {
		fmt.Fprintf(o.Err, "idemgate drill: %v\n", err)
		return ExitCannot
	}
	d, err := prepare(o, f)
	if err != nil {
		fmt.Fprintf(o.Err, "idemgate drill: %v\n", err)
		return ExitCannot
	}
	d.printPlan()
	ok, interrupted := d.until(func() bool { return d.confirmed() })
	switch {
	case interrupted:
		fmt.Fprintln(o.Err, "\nidemgate drill: interrupted before it started; nothing ran")
		return ExitInterrupted
	case !ok:
		return ExitCannot
	}
	var rep *Report
	if _, interrupted = d.until(func() bool {
		rep, err = d.runAll()
		return true
	}); interrupted {
		d.interrupted()
		return ExitInterrupted
	}
	if err != nil {
		fmt.Fprintf(o.Err, "idemgate drill: %v\n", err)
		return ExitCannot
	}
	rep.writeText(o.Out)
	for _, w := range []struct {
		path  string
		write func(io.Writer) error
	}{{o.JSON, rep.writeJSON}, {o.HTML, rep.writeHTML}} {
		if w.path == "" {
			continue
		}
		if err := writeFile(w.path, w.write); err != nil {
			fmt.Fprintf(o.Err, "idemgate drill: %v\n", err)
			return ExitCannot
		}
	}
	return rep.exitStatus()
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// prepare loads the route and makes the run's secret.
func prepare(o Options, f *File) (*drill, error) {
	if abs, err := filepath.Abs(f.Rules); err == nil {
		f.Rules = abs
	}
	rules, err := config.Load(f.Rules, config.Limits{})
	if err != nil {
		return nil, fmt.Errorf("the rules file: %w", err)
	}
	resolved, err := rules.Resolve(config.Limits{})
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(resolved, func(r config.Resolved) bool { return r.Name == f.Route })
	if i < 0 {
		return nil, fmt.Errorf("%s: route: %s has no route %q", o.File, f.Rules, f.Route)
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	secret := hex.EncodeToString(b[:])
	ids, err := keying.NewIDKey([]byte(secret))
	if err != nil {
		return nil, err
	}
	d := &drill{opts: o, file: f, route: resolved[i], run: newRun(), secret: secret, ids: ids,
		client: &http.Client{Timeout: maxScenario, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		byTag:  map[string]*Result{}}
	return d, nil
}

// host is a URL's host, for the plan: never its credentials or path.
func host(raw string) string {
	u, err := url.Parse(keying.ExpandEnv(raw))
	if err != nil {
		return "?"
	}
	return u.Host
}

// printPlan says what the drill will do and to whom.
func (d *drill) printPlan() {
	w, f := d.opts.Out, d.file
	fmt.Fprintf(w, "idemgate drill %s (run %s)\n", d.opts.File, d.run)
	fmt.Fprintf(w, "  target:   %s (%s %s), through a gateway and a fault proxy of the drill's own on 127.0.0.1\n", host(f.Upstream), f.Request.Method, f.Request.Path)
	fmt.Fprintf(w, "  rules:    %s, route %s\n", f.Rules, f.Route)
	store := "embedded, in a temporary directory"
	if f.Redis != "" {
		store = "Redis at " + host(f.Redis)
	}
	fmt.Fprintf(w, "  store:    %s\n", store)
	if f.Count != nil {
		fmt.Fprintf(w, "  count:    GET %s, %s\n", f.Count.URL, f.Count.Path)
	} else {
		fmt.Fprintf(w, "  count:    the upstream's 2xx answers through the drill's proxy (the drill file has no count request)\n")
	}
	ops := 0
	fmt.Fprintf(w, "  scenarios:\n")
	for _, name := range f.Scenarios {
		s := scenarioByName[name]
		fmt.Fprintf(w, "    %-17s %s; expected: %s\n", name, s.what(d), s.expect(d).text())
		ops += s.ops
	}
	fmt.Fprintf(w, "  This creates real records in %s: %d operations, new to the API.\n", host(f.Upstream), ops)
}

// confirmed reports whether the drill may run: -yes, or "yes" typed on a
// terminal.
func (d *drill) confirmed() bool {
	if d.opts.Yes {
		return true
	}
	if !d.opts.IsTTY {
		fmt.Fprintln(d.opts.Err, "idemgate drill: not run: pass -yes, or run it on a terminal to confirm")
		return false
	}
	fmt.Fprint(d.opts.Err, "Run the drill? Type yes: ")
	line, _ := bufio.NewReader(d.opts.Stdin).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		fmt.Fprintln(d.opts.Err, "idemgate drill: not run")
		return false
	}
	return true
}

// runAll starts the proxy and the gateway, runs the scenarios in order
// and stops both.
func (d *drill) runAll() (*Report, error) {
	dir, err := os.MkdirTemp("", "idemgate-drill-")
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.dir = dir
	d.mu.Unlock()
	defer os.RemoveAll(dir)
	pr, err := startProxy(keying.ExpandEnv(d.file.Upstream), d.proxyNote)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.proxy = pr
	d.mu.Unlock()
	defer pr.close()
	gw, err := newGateway(d.opts.Gateway, dir, d.file.Rules, keying.ExpandEnv(d.file.Redis), d.secret, d.proxy.addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.gw = gw
	d.mu.Unlock()
	defer gw.stop()
	if err := gw.start(); err != nil {
		return nil, err
	}
	rep := &Report{File: d.opts.File, Run: d.run, Upstream: host(d.file.Upstream), Route: d.route.Name,
		Store: "embedded", Counted: "count request", Started: time.Now().UTC()}
	if d.file.Redis != "" {
		rep.Store = "redis"
	}
	if d.file.Count == nil {
		rep.Counted = "the upstream's 2xx answers through the drill's proxy (no count request)"
	}
	d.start = time.Now()
	d.mu.Lock()
	d.rep = rep
	d.mu.Unlock()
	for i, name := range d.file.Scenarios {
		if d.stopped.Load() {
			break
		}
		s := scenarioByName[name]
		fmt.Fprintf(d.opts.Err, "[%d/%d] %s: %s ... ", i+1, len(d.file.Scenarios), name, s.what(d))
		r := &Result{Name: name, What: s.what(d), Expected: s.expect(d)}
		r.start = time.Now()
		d.mu.Lock()
		d.running = name
		d.mu.Unlock()
		if err := s.run(d, r); err != nil {
			r.Errors = append(r.Errors, err.Error())
		}
		r.finish()
		if d.stopped.Load() {
			break
		}
		fmt.Fprintln(d.opts.Err, r.Verdict)
		d.mu.Lock()
		rep.Results = append(rep.Results, r)
		d.running = ""
		d.mu.Unlock()
	}
	rep.Duration = time.Since(d.start).Round(time.Millisecond).String()
	return rep, nil
}

// note adds an event to r's timeline.
func (d *drill) note(r *Result, msg string) {
	d.mu.Lock()
	r.Timeline = append(r.Timeline, Event{At: time.Since(r.start).Round(time.Millisecond).String(), What: msg})
	d.mu.Unlock()
}

// proxyNote files a proxy event under its operation's scenario.
func (d *drill) proxyNote(tag, msg string) {
	d.mu.Lock()
	r := d.byTag[tag]
	d.mu.Unlock()
	if r != nil {
		n := strings.TrimPrefix(tag, d.run+"-")
		d.note(r, "#"+n+" "+msg)
	}
}

// errNoGateway wraps a failure to restart the drill's gateway.
var errNoGateway = errors.New("the drill's gateway did not come back")
