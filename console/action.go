package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// The actions, as the last segment of their path.
const (
	actionRelease  = "release"
	actionComplete = "complete"
	// actionVerify is in verify.go.
)

// Form limits.
const (
	// maxForm bounds a POSTed form.
	maxForm = 4 << 20
	// defaultMaxBody bounds a completion's body when the route is not
	// configured any more (else its max_response does).
	defaultMaxBody = 1 << 20
	// maxExternalID is the longest external id, as for ids taken from
	// upstream responses.
	maxExternalID = 255
	// maxContentType bounds the Content-Type of a completion.
	maxContentType = 256
)

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

// result checks a completion's fields and turns them into the result to
// store. When no external id is given, the route's external_id path is
// read from a JSON body, as for upstream responses.
func (f actionForm) result(rt config.Resolved, known bool) (store.Result, error) {
	var res store.Result
	status, err := strconv.Atoi(f.Status)
	if err != nil || status < 200 || status > 599 {
		return res, fmt.Errorf("the status must be a final HTTP status, 200 to 599 (got %q)", f.Status)
	}
	res.Status = status
	res.Body = []byte(f.Body)
	limit := int64(defaultMaxBody)
	if known && rt.MaxResponse > 0 {
		limit = rt.MaxResponse
	}
	switch {
	case int64(len(res.Body)) > limit:
		return res, fmt.Errorf("the body is larger than the route's max_response (%d bytes)", limit)
	case len(res.Body) > 0 && (status == http.StatusNoContent || status == http.StatusNotModified):
		return res, fmt.Errorf("status %d has no body: leave the body empty", status)
	case len(f.ContentType) > maxContentType || strings.ContainsFunc(f.ContentType, isControl):
		return res, errors.New("the content type is not a valid header value")
	case len(f.ExternalID) > maxExternalID || strings.ContainsFunc(f.ExternalID, isControl):
		return res, fmt.Errorf("the external id must be at most %d characters, without control characters", maxExternalID)
	}
	if f.ContentType != "" && len(res.Body) > 0 {
		res.Header = http.Header{"Content-Type": {f.ContentType}}
	}
	res.ExternalID = f.ExternalID
	if res.ExternalID == "" && known && rt.ExternalID != "" && isJSONType(f.ContentType) {
		if v := gjson.GetBytes(res.Body, rt.ExternalID); v.Exists() && len(v.String()) <= maxExternalID {
			res.ExternalID = v.String()
		}
	}
	return res, nil
}

func isControl(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }

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
		c.logger.Warn("console: cross-origin action refused", zap.String("key_id", safeID(id)), zap.String("action", action))
		p.renderError(w, http.StatusForbidden, "Refused: request from another site",
			"The browser says this form was sent from another site. Open the console itself and act from there.")
		return
	}
	if p.Anonymous && !c.AllowAnonymous {
		c.logger.Warn("console: action without a signed-in operator refused",
			zap.String("key_id", safeID(id)), zap.String("action", action))
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
			zap.String("key_id", safeID(id)), zap.String("action", action), zap.String("actor", p.Actor), zap.String("problem", err.Error()))
		p.renderError(w, http.StatusForbidden, "Refused: the form is not valid",
			"This form has expired or was not made by this console for you ("+err.Error()+"). Go back, reload the page and try again.")
		return
	}
	rec, ls, ok := c.lookup(w, r, p, id)
	if !ok {
		return
	}
	rt, known := ls.Routes[rec.Route]
	form := readForm(r)
	refuse := func(status int, msg string, cur *store.Record) {
		pg := newRecordPage(p, cur, rt, known)
		pg.Action, pg.Error = action, msg
		switch action {
		case actionComplete:
			pg.Form = form
		case actionVerify:
			pg.VerifyReason = form.Reason
		default:
			pg.ReleaseReason = form.Reason
		}
		p.render(w, status, "record", pg)
	}
	if form.Reason == "" {
		refuse(http.StatusUnprocessableEntity, "Give a reason: it is kept on the record with your name.", rec)
		return
	}
	if len(form.Reason) > store.MaxReasonLen {
		refuse(http.StatusUnprocessableEntity, fmt.Sprintf("The reason is longer than %d bytes.", store.MaxReasonLen), rec)
		return
	}
	var res store.Result
	if action == actionComplete {
		var err error
		if res, err = form.result(rt, known); err != nil {
			refuse(http.StatusUnprocessableEntity, sentence(err.Error())+".", rec)
			return
		}
	}
	if known && rt.Confirm && r.PostForm.Get("confirmed") != "yes" {
		pg := newRecordPage(p, rec, rt, known)
		pg.Action, pg.Form = action, form
		p.render(w, http.StatusOK, "confirm", confirmPage{recordPage: pg, BodySize: len(res.Body)})
		return
	}

	act := store.Action{Actor: p.Actor, Reason: form.Reason}
	ttl := store.DefaultTTL
	if known && rt.TTL > 0 {
		ttl = rt.TTL
	}
	var (
		done *store.Record
		err  error
	)
	switch action {
	case actionRelease:
		done, err = ls.Store.OperatorRelease(r.Context(), id, act, ttl)
	case actionVerify:
		done, err = c.verifier()(r.Context(), ls.Tag, id, act)
		switch {
		case errors.Is(err, caddymodule.ErrNoVerify):
			refuse(http.StatusConflict, "Not done: the route has no verify rule in the running config.", rec)
			return
		case errors.Is(err, store.ErrConflict):
			cur := done
			if cur == nil {
				cur = rec
			}
			refuse(http.StatusConflict, "Not done: "+verifyConflict(err)+".", cur)
			return
		}
	default:
		done, err = ls.Store.OperatorComplete(r.Context(), id, res, act, ttl)
	}
	switch {
	case errors.Is(err, store.ErrConflict):
		cur := done
		if cur == nil {
			cur = rec
		}
		refuse(http.StatusConflict, "Not done: the record changed meanwhile and is now "+stateTag(cur.State).Long+
			". Read it again before you act.", cur)
		return
	case errors.Is(err, store.ErrNotFound):
		p.renderError(w, http.StatusNotFound, "No such record", "The record expired or was removed before the action took effect.")
		return
	case errors.Is(err, store.ErrInvalidArgument):
		refuse(http.StatusUnprocessableEntity, "The store refused the action: "+err.Error(), rec)
		return
	case err != nil:
		c.logger.Error("console: operator action failed", zap.String("key_id", id), zap.String("action", action), zap.Error(err))
		p.renderError(w, http.StatusServiceUnavailable, "Record store unavailable",
			"The action could not be stored; nothing changed. Try again in a moment.")
		return
	}
	fields := []zap.Field{
		zap.String("route", done.Route), zap.String("key_id", id), zap.String("action", action),
		zap.String("actor", act.Actor), zap.String("previous_state", string(rec.State)),
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

// safeID is id for a log line when it may not be a record id.
func safeID(id string) string {
	if validRecordID(id) {
		return id
	}
	return "(not a record id)"
}
