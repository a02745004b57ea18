package console

import (
	"fmt"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
)

// actionRun runs the operation once more from the request its record
// kept (Run now), through the same guarded path as a client's retry.
const actionRun = "run"

// canRun reports whether Run now is offered: the store would allow the
// re-drive (store.RedriveRefusal), and the record's route still keeps
// requests.
func canRun(rec *store.Record, rt config.Resolved, known bool, now time.Time) bool {
	return known && rt.KeepRequest && store.RedriveRefusal(rec, now) == nil
}

// answerRow is one "not done" execution's answer on the record page.
type answerRow struct {
	At     time.Time
	Status int
}

// answersOf lists what the record's "not done" executions answered.
func answersOf(rec *store.Record) []answerRow {
	out := make([]answerRow, len(rec.Answers))
	for i, a := range rec.Answers {
		out[i] = answerRow{At: a.At, Status: a.Status}
	}
	return out
}

// exhaustedAdvice explains a record held because its retries were used
// up: what is known (the upstream said "not done" every time), that
// nothing is unknown, and the safe next step; or, when unknown outcomes
// used part of the budget, that the upstream may have acted.
func exhaustedAdvice(rec *store.Record) advice {
	if rec.Unknowns > 0 {
		return advice{
			Known: fmt.Sprintf("%s used up the route's retry budget; %s had an outcome nobody knows that the route's policy "+
				"(on_unknown_outcome: release) let go, so the upstream may have acted. It is held: retries are answered 409 and "+
				"nothing is sent upstream until someone acts.", sentence(plural(rec.NotDone, "execution")), fmt.Sprintf("%d of them", rec.Unknowns)),
			Unknown: "Whether " + rec.Route + " took effect upstream.",
			Next: "Look it up upstream: Complete with its answer if it took effect (retries replay it); Release if it did not: " +
				"then the client's next retry runs it once, and Run now is offered. Until then Run now is not offered.",
			Act:     true,
			Attempt: "None: held until an operator acts.",
		}
	}
	known := fmt.Sprintf("The upstream answered \"not done\" to %s", plural(rec.NotDone, "execution"))
	if n := len(rec.Answers); n > 0 {
		last := rec.Answers[n-1]
		known += fmt.Sprintf(" (the last with %d at %s)", last.Status, formatTime(last.At))
	}
	known += ": the operation did not take effect. The route allows no more, so it is held: " +
		"retries are answered 409 and nothing is sent upstream until someone acts."
	next := "When the upstream works again: Release, and the client's next retry runs it once; " +
		"Complete only if it was carried out some other way."
	if len(rec.Request) > 0 {
		next = "When the upstream works again: Run now (the gateway sends the kept request once, and retries replay its answer), " +
			"or Release and let the client's next retry run it. Complete only if it was carried out some other way."
	}
	return advice{
		Known:   known,
		Unknown: "Nothing about this operation: only when the upstream will work again.",
		Next:    next,
		Act:     true,
		Attempt: "None: held until an operator acts.",
	}
}

// nextAttempt says when the operation is tried next, for a record that
// is not exhausted.
func nextAttempt(rec *store.Record, now time.Time) string {
	switch rec.State {
	case store.StateUnknown:
		if !rec.NextCheck.IsZero() {
			return "A check upstream at " + formatTime(rec.NextCheck) + "; nothing is run again until someone acts."
		}
		return "None: held until an operator acts."
	case store.StateReleased:
		if !store.KnownNotDone(rec) {
			return "At the client's next retry."
		}
		return "At the client's next retry" + runNowHint(rec) + "."
	case store.StateInFlight:
		if rec.LeaseUntil.After(now) {
			return "Running now."
		}
	}
	return ""
}

func runNowHint(rec *store.Record) string {
	if len(rec.Request) > 0 {
		return ", or Run now"
	}
	return ""
}

// runNotice reports a re-drive on the record page.
func runNotice(rec *store.Record) string {
	switch rec.Class() {
	case store.StateCompleted:
		return "Ran once more: the upstream answered " + strconv.Itoa(rec.Status) + ". Retries now get this answer without calling the upstream. Your reason is on the timeline."
	case store.StateExhausted:
		return "Ran once more: the upstream said \"not done\" again, so the record is held again. Your reason is on the timeline."
	case store.StateReleased:
		if rec.Reason == store.ReasonUnknownReleased {
			return "Ran once more: the outcome is not known, and the route's policy (on_unknown_outcome: release) let it go; the next retry runs it again. Your reason is on the timeline."
		}
		return "Ran once more: the upstream said \"not done\"; the next retry runs it again. Your reason is on the timeline."
	}
	return "Ran once more: the outcome is not known (see the record). Your reason is on the timeline."
}

// ownersOf maps each live route to its owner.
func ownersOf(stores []operator.LiveStore) map[string]string {
	out := map[string]string{}
	for _, s := range stores {
		for name, rt := range s.Routes {
			if rt.Owner != "" {
				out[name] = rt.Owner
			}
		}
	}
	return out
}
