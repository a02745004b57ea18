package console

import (
	"bytes"
	"embed"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// assets are the page templates and the style sheet, built into the
// binary: no build step, nothing fetched from elsewhere.
//
//go:embed templates/*.html static/console.css
var assets embed.FS

// pageNames are the pages; each is templates/NAME.html inside
// templates/layout.html.
var pageNames = []string{"queue", "record", "confirm", "error"}

var pages = func() map[string]*template.Template {
	base := template.Must(template.New("layout.html").Funcs(template.FuncMap{
		"when":     formatTime,
		"iso":      isoTime,
		"plural":   plural,
		"stateTag": stateTag,
	}).ParseFS(assets, "templates/layout.html"))
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(assets, "templates/"+name+".html"))
	}
	return out
}()

var css = func() []byte {
	b, err := assets.ReadFile("static/console.css")
	if err != nil {
		panic(err)
	}
	return b
}()

// pageContext is what every page shows and needs: where the console's
// root is relative to the page, who is signed in, the form token.
type pageContext struct {
	c *Console
	r *http.Request

	// Root is the console's mount point relative to the current page
	// ("./", "../", "../../"), so that links work under any mount path.
	Root string
	// Actor is who acts from this page; Anonymous when nobody is signed
	// in, and then AnonymousActs when the console lets them act anyway
	// (allow_anonymous).
	Actor         string
	Anonymous     bool
	AnonymousActs bool
	// CSRF is the csrf_token of the page's forms.
	CSRF string
	// Now is when the page was made.
	Now time.Time
}

func newPageContext(c *Console, r *http.Request) *pageContext {
	p := &pageContext{c: c, r: r, Root: rootFrom(r.URL.Path), Now: time.Now()}
	p.Actor = resolveActor(r, c.Actor)
	if p.Actor == "" {
		p.Actor, p.Anonymous, p.AnonymousActs = anonymous, true, c.AllowAnonymous
	}
	p.CSRF = c.csrfToken(p.Actor, p.Now)
	return p
}

// rootFrom is the relative path from the page at path (inside the mount
// point) back to the console's root.
func rootFrom(path string) string {
	n := strings.Count(strings.TrimPrefix(path, "/"), "/")
	if n == 0 {
		return "./"
	}
	return strings.Repeat("../", n)
}

// maxActorLen bounds the actor taken from a placeholder (the store's own
// limit is larger).
const maxActorLen = 128

// resolveActor resolves the actor template for r; "" when it names
// nobody. Control characters are dropped and the result is bounded.
func resolveActor(r *http.Request, tmpl string) string {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		repl = caddy.NewReplacer()
	}
	a := strings.TrimSpace(repl.ReplaceAll(tmpl, ""))
	a = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, a)
	if len(a) > maxActorLen {
		a = strings.ToValidUTF8(a[:maxActorLen], "")
	}
	return a
}

// render writes page name with data and status. The page is made in full
// before anything is written, so a template error never leaves half a
// page.
func (p *pageContext) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := pages[name].ExecuteTemplate(&buf, "layout.html", data); err != nil {
		p.c.logger.Error("rendering a console page", zap.String("page", name), zap.Error(err))
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString("internal error: the page could not be rendered\n")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	if p.r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// errorPage is the data of the error page.
type errorPage struct {
	*pageContext
	Title   string
	Status  int
	Message string
}

// renderError writes the error page.
func (p *pageContext) renderError(w http.ResponseWriter, status int, title, msg string) {
	p.render(w, status, "error", errorPage{pageContext: p, Title: title, Status: status, Message: msg})
}

func serveCSS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(css)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(css)
	}
}

// formatTime shows t in UTC to the second; "" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// isoTime is t for a <time datetime> attribute.
func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// plural returns "1 attempt", "3 attempts".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}
