package console

import (
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// actionVerify asks the upstream now (the route's verify rule), through
// the same fenced store path as the admin API's verify.
const actionVerify = "verify"

// verificationView is what the record page shows of a record's checks.
type verificationView struct {
	// Shown: the record has a check or checks made.
	Shown  bool
	Method string
	URL    string
	Checks []checkLine
	Count  int64
	// Next is when the next scheduled check runs (zero: none); Running is
	// true while a check holds the record.
	Next    time.Time
	Running bool
	Streak  int64
}

// checkLine is one check on the page.
type checkLine struct {
	At      time.Time
	Status  string
	Verdict string
	Meaning string
}

// verdictText says what a verdict means.
func verdictText(v string) string {
	switch v {
	case store.VerdictApplied:
		return "found: the operation took effect"
	case store.VerdictNotApplied:
		return "not found"
	case store.VerdictInconclusive:
		return "no clear answer"
	case store.VerdictError:
		return "no answer"
	}
	return v
}

func verificationOf(rec *store.Record, now time.Time) verificationView {
	v := verificationView{
		Shown:  !rec.Check.IsZero() || len(rec.Checks) > 0,
		Method: rec.Check.Method, URL: rec.Check.URL,
		Count: rec.CheckCount, Streak: rec.NotFoundStreak,
	}
	for _, c := range rec.Checks {
		status := "none"
		if c.Status != 0 {
			status = strconv.Itoa(c.Status)
		}
		v.Checks = append(v.Checks, checkLine{At: c.At, Status: status, Verdict: c.Verdict, Meaning: verdictText(c.Verdict)})
	}
	if rec.State == store.StateUnknown {
		v.Next = rec.NextCheck
		v.Running = rec.CheckLeaseUntil.After(now)
	}
	return v
}

// canVerify reports whether the page offers Verify now: a held record
// that carries a check, on a route of the running config with a verify
// rule.
func canVerify(rec *store.Record, rt config.Resolved, known bool) bool {
	return rec.Class() == store.StateUnknown && !rec.Check.IsZero() && known && rt.Verify != nil
}

// checkEvents are the timeline's checks.
func checkEvents(rec *store.Record) []event {
	ev := make([]event, 0, len(rec.Checks))
	for _, c := range rec.Checks {
		title := "Checked upstream: " + verdictText(c.Verdict)
		detail := "The lookup gave no answer (error or timeout)."
		if c.Status != 0 {
			detail = "The lookup answered " + strconv.Itoa(c.Status) + "."
		}
		ev = append(ev, event{At: c.At, Kind: "check", Title: title, Detail: detail})
	}
	return ev
}

// queueChecks is the queue's line about a record's checks ("" for none).
func queueChecks(rec *store.Record) string {
	if len(rec.Checks) == 0 && (rec.State != store.StateUnknown || rec.NextCheck.IsZero()) {
		return ""
	}
	s := plural(rec.CheckCount, "check")
	if n := len(rec.Checks); n > 0 {
		s += ", last " + verdictText(rec.Checks[n-1].Verdict)
	}
	if rec.State == store.StateUnknown && !rec.NextCheck.IsZero() {
		s += "; next at " + formatTime(rec.NextCheck)
	}
	return s
}

// verifiedNotice reports the check an operator just ran.
func verifiedNotice(rec *store.Record) string {
	if len(rec.Checks) == 0 {
		return "Checked."
	}
	last := rec.Checks[len(rec.Checks)-1]
	switch rec.State {
	case store.StateCompleted:
		return "Checked upstream: the operation took effect. The record is completed with the lookup's answer; retries replay it."
	case store.StateReleased:
		return "Checked upstream: not found again. The record is released; the next retry runs the operation, once."
	}
	return "Checked upstream: " + verdictText(last.Verdict) + ". The record stays held."
}

// verifyConflict is why a check was refused, in words.
func verifyConflict(err error) string {
	msg := strings.TrimPrefix(err.Error(), store.ErrConflict.Error()+": ")
	return strings.TrimSuffix(msg, ".")
}
