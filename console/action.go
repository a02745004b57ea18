package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
)

// The actions, as the last segment of their path.
const (
	actionRelease  = "release"
	actionComplete = "complete"
	// actionVerify is in verify.go.
)

// maxForm bounds a POSTed form (the limits of what it carries are the
// operator service's: operator.Completion).
const maxForm = 4 << 20

// actionForm is what an action's form sends.
type actionForm struct {
	Reason      string
	Status      string
	ContentType string
	Body        string
	ExternalID  string
}

func readForm(r *http.Request) actionForm {
	// Browsers send a textarea's line breaks as CRLF: store what the
	// operator typed.
	lf := func(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }
	return actionForm{
		Reason:      strings.TrimSpace(lf(r.PostForm.Get("reason"))),
		Status:      strings.TrimSpace(r.PostForm.Get("status")),
		ContentType: strings.TrimSpace(r.PostForm.Get("content_type")),
		Body:        lf(r.PostForm.Get("body")),
		ExternalID:  strings.TrimSpace(r.PostForm.Get("external_id")),
	}
}

// completion turns a completion's fields into the operator service's
// Completion, which checks them by the same rules as the admin API's. A
// content type counts only with a body; an empty external id lets the
// service read it from the body at the route's external_id path.
func (f actionForm) completion() (operator.Completion, error) {
	status, err := strconv.Atoi(f.Status)
	if err != nil {
		return operator.Completion{}, fmt.Errorf("the status must be a final HTTP status, 200 to 599 (got %q)", f.Status)
	}
	c := operator.Completion{Status: status, Body: []byte(f.Body)}
	if f.ContentType != "" && len(c.Body) > 0 {
		c.Header = http.Header{"Content-Type": {f.ContentType}}
	}
	if f.ExternalID != "" {
		c.ExternalID = &f.ExternalID
	}
	return c, nil
}

// confirmPage is the data of the second confirmation step.
type confirmPage struct {
	recordPage
	BodySize int
}

// serveAction answers POST /records/{id}/{release|complete|verify}:
// checks origin, the signed-in operator (unless allow_anonymous), token,
// the record and the form, asks again on confirm
// routes, then takes the action through the store's fenced operator call
// and sends the browser back to the record.
func (c *Console) serveAction(w http.ResponseWriter, r *http.Request, p *pageContext, id, action string) {
	if err := c.origin.Check(r); err != nil {
		c.logger.Warn("console: cross-origin action refused", zap.String("record_id", safeID(id)), zap.String("action", action))
		p.renderError(w, http.StatusForbidden, "Refused: request from another site",
			"The browser says this form was sent from another site. Open the console itself and act from there.")
		return
	}
	if p.Anonymous && !c.AllowAnonymous {
		c.logger.Warn("console: action without a signed-in operator refused",
			zap.String("record_id", safeID(id)), zap.String("action", action))
		p.renderError(w, http.StatusForbidden, "Refused: nobody is signed in",
			"Every action is kept on the record with the operator who took it, read from "+c.Actor+
				", which Caddy's authentication in front of the console sets (basic_auth, or another authentication provider)."+
				" Here it names nobody, so nothing was changed. Mount the console behind basic_auth and sign in;"+
				" for a console reachable only from a trusted network, the console option allow_anonymous lets actions through as \"anonymous\".")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			p.renderError(w, http.StatusRequestEntityTooLarge, "Form too large", fmt.Sprintf("A form may carry at most %d bytes.", maxForm))
			return
		}
		p.renderError(w, http.StatusBadRequest, "Unreadable form", "The form could not be read.")
		return
	}
	if err := c.checkCSRF(r.PostForm.Get(csrfField), p.Actor, p.Now); err != nil {
		c.logger.Warn("console: action without a valid form token refused",
			zap.String("record_id", safeID(id)), zap.String("action", action), zap.String("actor", p.Actor), zap.String("problem", err.Error()))
		p.renderError(w, http.StatusForbidden, "Refused: the form is not valid",
			"This form has expired or was not made by this console for you ("+err.Error()+"). Go back, reload the page and try again.")
		return
	}
	op := c.operator()
	t, ok := c.lookup(w, r, p, id)
	if !ok {
		return
	}
	rec := t.Rec
	form := readForm(r)
	refuse := func(status int, msg string, cur *store.Record) {
		shown := t
		if cur != nil {
			shown.Rec = cur
		}
		pg := newRecordPage(p, shown)
		pg.Action, pg.Error = action, msg
		switch action {
		case actionComplete:
			pg.Form = form
		case actionVerify:
			pg.VerifyReason = form.Reason
		case actionRun:
			pg.RunReason = form.Reason
		default:
			pg.ReleaseReason = form.Reason
		}
		p.render(w, status, "record", pg)
	}
	if form.Reason == "" {
		refuse(http.StatusBadRequest, "Give a reason: it is kept on the record with your name.", nil)
		return
	}
	var comp operator.Completion
	var res store.Result
	if action == actionComplete {
		var err error
		if comp, err = form.completion(); err == nil {
			res, err = comp.Result(t)
		}
		if err != nil {
			refuse(http.StatusBadRequest, sentence(err.Error())+".", nil)
			return
		}
	}
	if t.Known && t.Route.Confirm && r.PostForm.Get("confirmed") != "yes" {
		pg := newRecordPage(p, t)
		pg.Action, pg.Form = action, form
		p.render(w, http.StatusOK, "confirm", confirmPage{recordPage: pg, BodySize: len(res.Body)})
		return
	}

	act := store.Action{Actor: p.Actor, Reason: form.Reason}
	var (
		done *store.Record
		err  error
	)
	switch action {
	case actionRelease:
		done, err = op.Release(r.Context(), t, act)
	case actionVerify:
		done, _, err = op.CheckOutcome(r.Context(), t, act)
	case actionRun:
		done, _, err = op.Run(r.Context(), t, act)
	default:
		done, res, err = op.Complete(r.Context(), t, comp, act)
	}
	switch status := operator.Status(err); {
	case errors.As(err, new(*operator.BreakerOpenError)), errors.Is(err, operator.ErrNoChain):
		refuse(http.StatusServiceUnavailable, "Not done: "+sentence(err.Error())+".", done)
		return
	case status == http.StatusOK:
	case status == http.StatusConflict:
		refuse(status, "Not done: "+conflictText(action, err, done, rec)+".", done)
		return
	case status == http.StatusNotFound:
		p.renderError(w, status, "No such record", "The record expired or was removed before the action took effect.")
		return
	case status == http.StatusBadRequest:
		refuse(status, "Not done: "+sentence(strings.TrimPrefix(err.Error(), store.ErrInvalidArgument.Error()+": "))+".", done)
		return
	default:
		c.logger.Error("console: operator action failed", zap.String("record_id", id), zap.String("action", action), zap.Error(err))
		p.renderError(w, http.StatusServiceUnavailable, "Record store unavailable",
			"The action could not be stored; nothing changed. Try again in a moment.")
		return
	}
	fields := []zap.Field{
		zap.String("route", done.Route), zap.String("record_id", id), zap.String("action", action),
		zap.String("actor", act.Actor), zap.String("previous_state", string(rec.Class())),
		zap.Int64("executions", done.Executions),
	}
	if action == actionComplete {
		fields = append(fields, zap.Int("status", res.Status))
	}
	c.logger.Info("record resolved from the console", fields...)

	// Post/Redirect/Get, relative to this page (not http.Redirect: it
	// would resolve the target against the stripped path).
	w.Header().Set("Location", p.Root+"records/"+id+"?done="+action)
	w.WriteHeader(http.StatusSeeOther)
}

// conflictText says in words why the record's state refused the action
// (cur: the record as the refusal left it, nil when unknown; rec: as
// found).
func conflictText(action string, err error, cur, rec *store.Record) string {
	if cur == nil {
		cur = rec
	}
	switch {
	case errors.Is(err, operator.ErrNoVerify):
		return "the route has no verify rule in the running config"
	case errors.Is(err, store.ErrCheckRunning):
		return "a verification check is asking the upstream right now, and its answer may resolve the record. Act once it has ended (reload the page in a moment)"
	case action == actionVerify:
		return verifyConflict(err)
	case action == actionRun:
		// The store's refusal says why in full (outcome unknown, completed, no kept request).
		_, why, _ := strings.Cut(err.Error(), store.ErrConflict.Error()+": ")
		return orDefault(why, err.Error())
	}
	return "the record changed meanwhile and is now " + stateTag(cur.State).Long + ". Read it again before you act"
}

// safeID is id for a log line when it may not be a record id.
func safeID(id string) string {
	if operator.ValidRecordID(id) {
		return id
	}
	return "(not a record id)"
}
