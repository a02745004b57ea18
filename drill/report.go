package drill

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is a drill's outcome: one Result per scenario. It holds no
// request bodies, header values or credentials.
type Report struct {
	File     string    `json:"file"`
	Run      string    `json:"run"`
	Upstream string    `json:"upstream"` // host
	Route    string    `json:"route"`
	Store    string    `json:"store"`   // embedded or redis
	Counted  string    `json:"counted"` // how records were counted
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Results  []*Result `json:"scenarios"`
}

// Expect is a scenario's expected outcome, written down before it runs.
type Expect struct {
	Min   int    `json:"min_records"`
	Max   int    `json:"max_records"`
	Text  string `json:"text"`
	State string `json:"state"`
}

func (e Expect) text() string { return e.Text + "; final state " + e.State }

// Records is the expected count, for the table.
func (e Expect) Records() string {
	if e.Min == e.Max {
		return strconv.Itoa(e.Max)
	}
	return strconv.Itoa(e.Min) + "-" + strconv.Itoa(e.Max)
}

// Verdicts.
const (
	Held    = "held"
	Failed  = "FAILED"
	Error   = "ERROR"
	Skipped = "skipped"
)

// Result is one scenario's run.
type Result struct {
	Name          string   `json:"name"`
	What          string   `json:"what"`
	Expected      Expect   `json:"expected"`
	Records       *int     `json:"records"`                // observed; nil when not counted
	RecordsNote   string   `json:"records_note,omitempty"` // e.g. "0 while down"
	Operations    int      `json:"operations"`
	Attempts      int      `json:"attempts"`       // requests sent to the gateway
	UpstreamCalls int      `json:"upstream_calls"` // requests that reached the upstream
	State         string   `json:"state"`          // final state from the admin API
	Verdict       string   `json:"verdict"`
	Failures      []string `json:"failures,omitempty"`
	Errors        []string `json:"errors,omitempty"`
	Skipped       string   `json:"skipped,omitempty"`
	Timeline      []Event  `json:"timeline"`
	start         time.Time
}

// Event is one line of a scenario's timeline.
type Event struct {
	At   string `json:"at"` // since the scenario started
	What string `json:"what"`
}

func (r *Result) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

func (r *Result) finish() {
	switch {
	case len(r.Failures) > 0:
		r.Verdict = Failed
	case len(r.Errors) > 0:
		r.Verdict = Error
	case r.Skipped != "":
		r.Verdict = Skipped
	default:
		r.Verdict = Held
	}
}

// Observed is the observed count, for the table.
func (r *Result) Observed() string {
	if r.Records == nil {
		return "-"
	}
	s := strconv.Itoa(*r.Records)
	if r.RecordsNote != "" {
		s = r.RecordsNote + ", then " + s
	}
	return s
}

// exitStatus: 1 when a scenario failed, else 2 when one could not run,
// else 0.
func (rep *Report) exitStatus() int {
	status := ExitHeld
	for _, r := range rep.Results {
		switch r.Verdict {
		case Failed:
			return ExitFailed
		case Error:
			status = ExitCannot
		}
	}
	return status
}

// Summary is the report's last line.
func (rep *Report) Summary() string {
	n := map[string]int{}
	for _, r := range rep.Results {
		n[r.Verdict]++
	}
	s := fmt.Sprintf("%d of %d scenarios held", n[Held], len(rep.Results))
	if n[Failed] > 0 {
		s += fmt.Sprintf(", %d FAILED", n[Failed])
	}
	if n[Error] > 0 {
		s += fmt.Sprintf(", %d could not run", n[Error])
	}
	if n[Skipped] > 0 {
		s += fmt.Sprintf(", %d skipped", n[Skipped])
	}
	return s
}

// writeText writes the terminal table and, under it, why each scenario
// that did not hold did not.
func (rep *Report) writeText(w io.Writer) {
	fmt.Fprintf(w, "\nidemgate drill: %s, route %s, %s store, run %s, %s\n", rep.Upstream, rep.Route, rep.Store, rep.Run, rep.Duration)
	fmt.Fprintf(w, "records counted by: %s\n\n", rep.Counted)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tEXPECTED\tOBSERVED\tSENT\tUPSTREAM\tFINAL STATE\tVERDICT")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Name, r.Expected.Records(), r.Observed(), r.Attempts, r.UpstreamCalls, orDash(r.State), r.Verdict)
	}
	tw.Flush()
	for _, r := range rep.Results {
		for _, f := range r.Failures {
			fmt.Fprintf(w, "%s FAILED: %s\n", r.Name, f)
		}
		for _, e := range r.Errors {
			fmt.Fprintf(w, "%s could not run: %s\n", r.Name, e)
		}
		if r.Skipped != "" {
			fmt.Fprintf(w, "%s skipped: %s\n", r.Name, r.Skipped)
		}
	}
	fmt.Fprintf(w, "\n%s\n", rep.Summary())
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

func (rep *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
