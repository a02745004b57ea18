package console

import (
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemgate/idemgate/store"
)

// stateInfo is how a state is named on the pages.
type stateInfo struct {
	Label string // "Held"
	Long  string // "Held: outcome unknown"
	Class string // CSS class of its tag
}

func stateTag(st store.State) stateInfo {
	switch st {
	case store.StateUnknown:
		return stateInfo{"Held", "Held: outcome unknown", "held"}
	case store.StateExhausted:
		return stateInfo{"Held", "Held: retries exhausted", "held"}
	case store.StateInFlight:
		return stateInfo{"In flight", "In flight", "inflight"}
	case store.StateReleased:
		return stateInfo{"Released", "Released", "released"}
	case store.StateCompleted:
		return stateInfo{"Completed", "Completed", "completed"}
	}
	return stateInfo{string(st), string(st), "other"}
}

// reasonText says in words why a record is in its state.
func reasonText(rec *store.Record) string {
	switch rec.Reason {
	case "":
		return ""
	case "upstream_5xx":
		return "the upstream answered with a server error (5xx) after it had the request"
	case "upstream_error":
		return "the call failed after the request was sent (timeout or connection reset)"
	case "response_aborted":
		return "the upstream's answer broke off in the middle"
	case "client_closed":
		return "the client went away before the upstream answered"
	case "lease_expired":
		return "the call's lease ran out without a result (the gateway stopped or the call hung)"
	case store.ReasonOperator:
		return "resolved by an operator"
	case store.ReasonNotDone:
		return "the upstream said \"not done\" (a retry status or a redirect), or the request never left"
	case store.ReasonRefused:
		return "the upstream refused the request as it was sent (401, 403, 404, 405, 413, 415 or 431): nothing was done, and a request with another payload under its key is a new one"
	case store.ReasonUnknownReleased:
		return "the outcome was not known, and the route's policy (on_unknown_outcome: release) let it go: the upstream may have acted"
	case store.ReasonRetriesExhausted:
		return "the upstream answered \"not done\" to every execution the route allows (retry.max_executions)"
	case "verified":
		return "found upstream by a verification check"
	case store.ReasonVerifiedNotApplied:
		return "verification checks found nothing upstream, twice or more in a row"
	case store.ReasonSamePayload:
		return "an operation with the same payload completed under another key within the route's same_payload_window (on_same_payload: hold); it was never sent upstream"
	}
	return rec.Reason
}

// advice is what a record means and the safe next step, in words.
type advice struct {
	// Known and Unknown: what is known and what is not.
	Known, Unknown string
	// Next is the safe next action.
	Next string
	// Act is true when an operator needs to do something.
	Act bool
	// Alarm is true when the record shows something wrong (more than one
	// execution of a completed operation).
	Alarm bool
	// Attempt says when the operation is tried next ("" for never).
	Attempt string
}

// adviceFor explains rec as of now.
func adviceFor(rec *store.Record, now time.Time) advice {
	if rec.Class() == store.StateExhausted {
		return exhaustedAdvice(rec)
	}
	a := stateAdvice(rec, now)
	a.Attempt = nextAttempt(rec, now)
	return a
}

// stateAdvice explains rec by its state.
func stateAdvice(rec *store.Record, now time.Time) advice {
	switch rec.State {
	case store.StateUnknown:
		if rec.Reason == store.ReasonSamePayload {
			return advice{
				Known: "Held before it was sent: " + reasonText(rec) + ". Retries are answered 409 until someone resolves it.",
				Unknown: "Whether this is the same operation sent again under a new key (a sender that mints a new id for each emission) " +
					"or a new operation that happens to repeat the payload (two identical orders).",
				Next: "Compare it with the operation completed under the other key (the log line names both records). " +
					"The same operation: Complete with that operation's answer (retries replay it). A new one: Release (the next retry runs it once).",
				Act: true,
			}
		}
		a := advice{
			Known: "Held: " + orDefault(reasonText(rec), "the gateway could not tell the outcome") + ". " +
				"Retries are answered 409 and nothing is sent upstream until someone resolves it.",
			Unknown: "Whether " + rec.Route + " took effect upstream.",
			Next: "The upstream may have done it: look it up there, then Complete with its answer " +
				"(retries replay it) or Release (the next retry runs it once" + runNowHint(rec) + ").",
			Act: true,
		}
		if !rec.Check.IsZero() {
			a.Known = "Held: " + orDefault(reasonText(rec), "the gateway could not tell the outcome") + ". " +
				"The gateway asks the upstream by the same key (" + plural(rec.CheckCount, "check") + " so far); " +
				"every retry checks first."
			if !rec.NextCheck.IsZero() {
				a.Next = "Nothing to do yet: the next check runs at " + formatTime(rec.NextCheck) + ". Or Verify now; " +
					"if the lookup cannot settle it, look it up there, then Complete or Release."
				a.Act = false
			} else {
				a.Next = "The scheduled checks could not settle it: Verify now, or look it up upstream, then Complete " +
					"with its answer (retries replay it) or Release (the next retry runs it once)."
			}
		}
		return a
	case store.StateInFlight:
		if rec.LeaseUntil.After(now) {
			return advice{
				Known:   "The call is running; its lease lasts until " + formatTime(rec.LeaseUntil) + " and is renewed while it runs.",
				Unknown: "Its result, until it answers.",
				Next:    "Nothing to do: wait. Retries get 409 meanwhile.",
			}
		}
		return advice{
			Known:   "The call's lease ran out at " + formatTime(rec.LeaseUntil) + " without a result: the gateway may have stopped mid-call.",
			Unknown: "Whether " + rec.Route + " took effect upstream.",
			Next:    "The next retry holds it as outcome unknown. Look it up upstream, then Complete or Release.",
			Act:     true,
		}
	case store.StateReleased:
		return releasedAdvice(rec)
	case store.StateCompleted:
		a := advice{
			Known: "Completed with status " + strconv.Itoa(rec.Status) + "; retries replay the stored answer.",
			Next:  "Nothing to do.",
		}
		if rec.Reason == "operator" {
			a.Known = "Completed by an operator with status " + strconv.Itoa(rec.Status) + "; retries replay it."
		}
		if rec.Executions > 1 {
			a.Alarm = true
			a.Next = fmt.Sprintf("The upstream was called %d times for this one operation. Expected when the earlier "+
				"calls were refused (a retry status such as 503) or released by an operator; otherwise check the upstream for duplicates.",
				rec.Executions)
			releases := int64(0)
			for _, e := range rec.Audit {
				if e.Action == store.AuditRelease {
					releases++
				}
			}
			if rec.Audit != nil && releases >= rec.Executions-1 {
				// The trail explains every extra execution.
				a.Alarm = false
				a.Next = fmt.Sprintf("Nothing to do: the upstream was called %d times, each extra call after an operator's release (see the timeline).",
					rec.Executions)
			}
		}
		return a
	}
	return advice{Known: "State " + string(rec.State) + ".", Next: "No advice for this state."}
}

// releasedAdvice explains a released record by why it was released:
// only an operation known not done is offered Run now.
func releasedAdvice(rec *store.Record) advice {
	next := "Nothing to do: the next retry with the same payload runs it, once."
	switch {
	case store.KnownNotDone(rec):
		known := "The last attempt is known not to have taken effect (the upstream said \"not done\", or the request never left)."
		switch rec.Reason {
		case store.ReasonOperator:
			known = "Released by an operator."
		case store.ReasonVerifiedNotApplied:
			known = "Released: verification checks found nothing upstream."
		}
		if len(rec.Request) > 0 {
			next += " If the sender has given up, Run now sends the kept request once."
		}
		return advice{Known: known, Next: next}
	case rec.Reason == store.ReasonUnknownReleased:
		return advice{
			Known:   "Released by the route's policy (on_unknown_outcome: release) after an outcome nobody knows: the upstream may have acted.",
			Unknown: "Whether " + rec.Route + " took effect upstream.",
			Next: "The next retry with the same payload runs it again (the policy trusts the upstream to honour the forwarded key). " +
				"Run now is not offered: look it up upstream first, then Complete with its answer if it took effect, or Release if it did not.",
		}
	}
	return advice{
		Known: "Released, but " + plural(rec.Unknowns, "earlier execution") + " had an outcome nobody knows, let go by the route's policy " +
			"(on_unknown_outcome: release), or the release predates the reasons: the upstream may have acted.",
		Unknown: "Whether " + rec.Route + " took effect upstream.",
		Next: "The next retry with the same payload runs it again. Run now is not offered: look it up upstream first, " +
			"then Complete with its answer if it took effect, or Release if it did not.",
	}
}

// sentence starts s with a capital letter.
func sentence(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToUpper(r)) + s[n:]
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// age says how long ago t was, in the two largest units: "42 s",
// "5 min", "3 h 12 min", "4 d 2 h".
func age(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d d %d h", int(d.Hours())/24, int(d.Hours())%24)
}
