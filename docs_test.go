package idemgate_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/idemgate/idemgate"
)

// docPages are the user documents whose links TestDocsLinks checks.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md", "bench/HISTORY.md"}, pages...)
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdFence = regexp.MustCompile("(?s)\n```.*?\n```")
	mdCode  = regexp.MustCompile("`[^`\n]*`")
)

// TestDocsLinks fails on a relative link in README.md, docs/*.md or
// bench/HISTORY.md that names a file that does not exist, or a heading
// that the linked page (or the page itself) does not have, as GitHub
// makes its anchors.
func TestDocsLinks(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		anchors[page] = headingAnchors(string(b))
		return anchors[page]
	}
	for _, page := range docPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := mdCode.ReplaceAllString(mdFence.ReplaceAllString(string(b), "\n"), "")
		n := 0
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", page, target, dest)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[anchor] {
				t.Errorf("%s: link %q: %s has no heading #%s", page, target, dest, anchor)
			}
		}
		if n == 0 && page == "README.md" {
			t.Errorf("%s: no relative links found", page)
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown page: lower case, punctuation dropped, spaces as hyphens, a
// repeated one suffixed -1, -2, ...
func headingAnchors(text string) map[string]bool {
	text = mdFence.ReplaceAllString("\n"+text, "\n")
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			out[a+"-"+itoa(k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}

func TestHeadingAnchors(t *testing.T) {
	for _, c := range []struct{ heading, anchor string }{
		{"## Retries and the recovery path", "retries-and-the-recovery-path"},
		{"### `wait_replicas`: narrowing the window", "wait_replicas-narrowing-the-window"},
		{"## Two connections: the speed issue's start against this tree", "two-connections-the-speed-issues-start-against-this-tree"},
		{"## `verify`, `release` or plain `hold`?", "verify-release-or-plain-hold"},
		{"### Route rules (YAML)", "route-rules-yaml"},
	} {
		if a := headingAnchors(c.heading + "\n"); !a[c.anchor] {
			t.Errorf("%q: anchors %v, want %q", c.heading, a, c.anchor)
		}
	}
	if a := headingAnchors("## Limits\ntext\n## Limits\n"); !a["limits"] || !a["limits-1"] {
		t.Errorf("a repeated heading: anchors %v, want limits and limits-1", a)
	}
}

// TestDocsSizes keeps the README a front door and docs/performance.md a
// user document: the history lives in bench/HISTORY.md.
func TestDocsSizes(t *testing.T) {
	for _, c := range []struct {
		page string
		max  int64
	}{
		{"README.md", 15 * 1024},
		{"docs/performance.md", 15 * 1024},
	} {
		fi, err := os.Stat(c.page)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > c.max {
			t.Errorf("%s is %d bytes, more than %d", c.page, fi.Size(), c.max)
		}
	}
}

// TestReadmeMinimalSetup adapts the README's minimal Caddyfile with its
// routes.yaml, as `idemgate run` would: the rules must validate (an error
// names file, line and field) and every route must reach the config.
func TestReadmeMinimalSetup(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## A minimal setup\n")
	if !ok {
		t.Fatal(`README.md has no "## A minimal setup" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	block := func(lang string) string {
		_, rest, ok := strings.Cut(section, "```"+lang+"\n")
		if !ok {
			t.Fatalf("the minimal setup has no %s block", lang)
		}
		body, _, _ := strings.Cut(rest, "```")
		return body
	}
	caddyfile, rules := block("caddyfile"), block("yaml")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "routes.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "Caddyfile")
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": path})
	if err != nil {
		t.Fatalf("adapting the README's Caddyfile: %v", err)
	}
	for _, w := range warnings {
		t.Errorf("adapting the README's Caddyfile: warning %s:%d: %s", w.File, w.Line, w.Message)
	}
	names := regexp.MustCompile(`(?m)^  - name: (\S+)`).FindAllStringSubmatch(rules, -1)
	if len(names) < 2 {
		t.Fatalf("the minimal routes.yaml has %d routes, want the header-key and the webhook one", len(names))
	}
	for _, n := range names {
		if !strings.Contains(string(out), `"name":"`+n[1]+`"`) {
			t.Errorf("route %s is not in the adapted config:\n%s", n[1], out)
		}
	}
	for _, want := range []string{`"handler":"idempotency"`, `"handler":"reverse_proxy"`, `{body.id}`, `"verify"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the adapted config has no %s:\n%s", want, out)
		}
	}
}
