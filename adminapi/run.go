package adminapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
)

// retriesView is what the record view shows of the retry budget: how many
// executions ended "not done" (Unknowns of them with an unknown outcome
// that on_unknown_outcome: release let go), what each answered, and
// whether the record kept its request for a re-drive.
type retriesView struct {
	NotDone     int64        `json:"not_done"`
	Unknowns    int64        `json:"unknowns,omitempty"`
	Answers     []answerView `json:"answers,omitempty"`
	KeptRequest bool         `json:"kept_request,omitempty"`
}

// answerView is one "not done" execution's answer.
type answerView struct {
	At     time.Time `json:"at"`
	Status int       `json:"status"`
}

// retries is the record's retriesView; nil when it has nothing to show.
func retries(rec *store.Record) *retriesView {
	if rec.NotDone == 0 && len(rec.Answers) == 0 && len(rec.Request) == 0 {
		return nil
	}
	v := &retriesView{NotDone: rec.NotDone, Unknowns: rec.Unknowns, KeptRequest: len(rec.Request) > 0}
	for _, a := range rec.Answers {
		v.Answers = append(v.Answers, answerView{At: a.At.UTC(), Status: a.Status})
	}
	return v
}

// runView is the answer to a re-drive: the upstream's status and the
// record after the run.
type runView struct {
	UpstreamStatus int        `json:"upstream_status"`
	Record         recordView `json:"record"`
}

// run answers POST /idempotency/records/{id}/run: the operation runs once
// more through the guarded path (see operator.Service.Run), synchronously.
func (a *AdminAPI) run(w http.ResponseWriter, r *http.Request, id string) error {
	op, t, act, err := a.actionOn(w, r, id, false)
	if err != nil {
		return err
	}
	rec, status, err := op.Run(r.Context(), t, act)
	if open := (*operator.BreakerOpenError)(nil); errors.As(err, &open) {
		w.Header().Set("Retry-After", strconv.Itoa(open.RetryAfter()))
	}
	if err != nil {
		return storeError(err)
	}
	a.log().Info("record run again by an operator",
		zap.String("route", rec.Route), zap.String("record_id", id), zap.String("actor", act.Actor),
		zap.String("previous_state", string(t.Rec.Class())), zap.Int("upstream_status", status),
		zap.String("state", string(rec.Class())))
	v := view(rec, t.Redactor())
	v.Owner = t.Route.Owner
	return writeJSON(w, runView{UpstreamStatus: status, Record: v})
}
