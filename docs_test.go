package idemgate_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/signature/senders"
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
			out[a+"-"+strconv.Itoa(k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestHeadingAnchors(t *testing.T) {
	for _, c := range []struct{ heading, anchor string }{
		{"## Retries and the recovery path", "retries-and-the-recovery-path"},
		{"### `wait_replicas`: narrowing the window", "wait_replicas-narrowing-the-window"},
		{"## Two connections: the speed targets' baseline against this tree", "two-connections-the-speed-targets-baseline-against-this-tree"},
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

// TestWebhookSenderSnippets loads every YAML snippet of docs/webhooks.md's
// "Your sender by name" and of the README's "Webhooks" as a rules file:
// each is valid, warns of nothing, names a sender whose preset gives the
// route its scheme and key; every sender has its snippet and its row in
// docs/webhooks.md's table.
func TestWebhookSenderSnippets(t *testing.T) {
	for _, doc := range []struct{ page, heading string }{{"docs/webhooks.md", "## Your sender by name"}, {"README.md", "## Webhooks"}} {
		section := docSection(t, doc.page, doc.heading)
		named := map[string]bool{}
		for i, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(section, -1) {
			file := doc.page + " snippet " + strconv.Itoa(i+1)
			rules, err := config.Parse(file, []byte(m[1]), config.Limits{})
			if err != nil {
				t.Errorf("%s: %v", file, err)
				continue
			}
			if w := rules.Warnings(); w != nil {
				t.Errorf("%s: warnings: %v", file, w)
			}
			res, err := rules.Resolve(config.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Sender == "" || r.Signature == nil || len(r.Key) == 0 {
					t.Errorf("%s: route %s resolves without a sender, a signature or a key", file, r.Name)
				}
				named[r.Sender] = true
			}
		}
		if len(named) == 0 {
			t.Errorf("%s: no route names a sender under %q", doc.page, doc.heading)
		}
		if doc.page != "docs/webhooks.md" {
			continue
		}
		for _, p := range senders.All() {
			if !named[p.Name] && p.Name != "svix" {
				t.Errorf("docs/webhooks.md has no route for sender %s", p.Name)
			}
			if !strings.Contains(section, "\n| `"+p.Name+"` |") {
				t.Errorf("docs/webhooks.md's table has no row for sender %s", p.Name)
			}
		}
	}
}

// docSection is the text of page from heading to the next heading of
// its level.
func docSection(t *testing.T, page, heading string) string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no heading %q", page, heading)
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	rest := text[start+1:]
	if end := strings.Index(rest[len(heading):], "\n"+level); end >= 0 {
		return rest[:len(heading)+end]
	}
	return rest
}
