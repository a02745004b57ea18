package drill

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// until runs fn and reports what it returned, unless the drill is
// interrupted (SIGINT, SIGTERM) first: then it returns at once with
// interrupted set, and fn goes on in the background until the process
// exits (whatever it waits for, the drill's own gateway and proxy stop
// under it).
func (d *drill) until(fn func() bool) (ok, interrupted bool) {
	if d.opts.Interrupt == nil {
		return fn(), false
	}
	done := make(chan bool, 1)
	go func() { done <- fn() }()
	select {
	case ok = <-done:
		return ok, false
	case sig := <-d.opts.Interrupt:
		d.stopped.Store(true)
		fmt.Fprintf(d.opts.Err, "\nidemgate drill: %v: interrupted; stopping its gateway and fault proxy\n", sig)
		return false, true
	}
}

// interrupted tears the drill down after an interrupt: it stops the
// drill's gateway (so nothing of it keeps using the store, or the
// user's Redis) and its fault proxy, removes its temporary directory,
// and prints what it had done so far.
func (d *drill) interrupted() {
	d.mu.Lock()
	gw, pr, dir, rep, running := d.gw, d.proxy, d.dir, d.rep, d.running
	var results []*Result
	if rep != nil {
		results = append(results, rep.Results...)
	}
	d.dir = ""
	d.mu.Unlock()
	var done []string
	if gw != nil {
		gw.stop()
		done = append(done, "gateway stopped")
	}
	if pr != nil {
		pr.close()
		done = append(done, "fault proxy stopped")
	}
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(d.opts.Err, "idemgate drill: removing %s: %v\n", dir, err)
		} else {
			done = append(done, "temporary files removed")
		}
	}
	if len(done) > 0 {
		fmt.Fprintf(d.opts.Err, "idemgate drill: %s\n", strings.Join(done, ", "))
	}
	if rep != nil {
		part := *rep
		part.Results = results
		part.Duration = time.Since(d.start).Round(time.Millisecond).String()
		part.writeText(d.opts.Out)
	}
	left := len(d.file.Scenarios) - len(results)
	fmt.Fprintf(d.opts.Out, "interrupted: %d of %d scenarios ran", len(results), len(d.file.Scenarios))
	if running != "" {
		fmt.Fprintf(d.opts.Out, "; %s was running and is not judged", running)
	}
	if left > 0 {
		fmt.Fprintf(d.opts.Out, "; %d not run", left)
	}
	fmt.Fprintln(d.opts.Out)
}
