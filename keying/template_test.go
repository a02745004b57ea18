package keying

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		in        string
		wantErr   string // substring; "" = valid
		needsBody bool
		parts     []part
	}{
		{in: "{header.Idempotency-Key}", parts: []part{{srcHeader, "Idempotency-Key"}}},
		{in: "{header.idempotency-key}", parts: []part{{srcHeader, "Idempotency-Key"}}},
		{in: "{query.id}", parts: []part{{srcQuery, "id"}}},
		{in: "{form.order_id}", needsBody: true, parts: []part{{srcForm, "order_id"}}},
		{in: "{body.event.id}:{body.event.type}", needsBody: true, parts: []part{
			{srcBody, "event.id"}, {srcLiteral, ":"}, {srcBody, "event.type"}}},
		{in: "evt-{query.id}-x", parts: []part{{srcLiteral, "evt-"}, {srcQuery, "id"}, {srcLiteral, "-x"}}},
		{in: "{query.a}{header.B}", parts: []part{{srcQuery, "a"}, {srcHeader, "B"}}},
		{in: "tenant-a", parts: []part{{srcLiteral, "tenant-a"}}},
		{in: `{body.a\.b}`, needsBody: true, parts: []part{{srcBody, `a\.b`}}},
		{in: "{body.items.#.sku}", needsBody: true, parts: []part{{srcBody, "items.#.sku"}}},
		{in: "{query.a.b}", parts: []part{{srcQuery, "a.b"}}},

		{in: "", wantErr: "empty"},
		{in: "{", wantErr: "unbalanced '{' at offset 0"},
		{in: "{header.X", wantErr: "unbalanced '{' at offset 0"},
		{in: "a{header.X{query.y}}", wantErr: "unbalanced '{' at offset 1"},
		{in: "}", wantErr: "unbalanced '}' at offset 0"},
		{in: "{query.a}}", wantErr: "unbalanced '}' at offset 9"},
		{in: "{}", wantErr: "empty placeholder"},
		{in: "{header}", wantErr: `"header" has no source`},
		{in: "{cookie.sid}", wantErr: `unknown source "cookie"`},
		{in: "{Header.X}", wantErr: `unknown source "Header"`},
		{in: "{.x}", wantErr: `unknown source ""`},
		{in: "{header.}", wantErr: `empty name after "header."`},
		{in: "{body.}", wantErr: `empty name after "body."`},
		{in: "{query.}", wantErr: "empty name"},
		{in: "{form.}", wantErr: "empty name"},
		{in: "{header.X Y}", wantErr: "invalid byte 0x20"},
		{in: "{header.X:Y}", wantErr: "invalid byte 0x3a"},
		{in: "a b", wantErr: "byte 0x20 at offset 1"},
		{in: "a\tb{query.x}", wantErr: "byte 0x09 at offset 1"},
		{in: "é{query.x}", wantErr: "byte 0xc3 at offset 0"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			tmpl, err := ParseTemplate(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseTemplate(%q) = nil error, want %q", tt.in, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTemplate(%q) error %q, want it to contain %q", tt.in, err, tt.wantErr)
				}
				if !errors.Is(err, ErrTemplate) {
					t.Fatalf("error %v does not wrap ErrTemplate", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTemplate(%q): %v", tt.in, err)
			}
			if got := tmpl.String(); got != tt.in {
				t.Errorf("String() = %q, want %q", got, tt.in)
			}
			if got := tmpl.NeedsBody(); got != tt.needsBody {
				t.Errorf("NeedsBody() = %v, want %v", got, tt.needsBody)
			}
			if len(tmpl.parts) != len(tt.parts) {
				t.Fatalf("parts = %v, want %v", tmpl.parts, tt.parts)
			}
			for i := range tt.parts {
				if tmpl.parts[i] != tt.parts[i] {
					t.Errorf("part %d = %v, want %v", i, tmpl.parts[i], tt.parts[i])
				}
			}
		})
	}
}

func TestMustParseTemplate(t *testing.T) {
	if got := MustParseTemplate("{query.x}").String(); got != "{query.x}" {
		t.Fatalf("String() = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MustParseTemplate of a bad template did not panic")
		}
	}()
	MustParseTemplate("{nope.x}")
}

func TestZeroTemplate(t *testing.T) {
	var tmpl Template
	if tmpl.String() != "" || tmpl.NeedsBody() {
		t.Fatalf("zero template: String %q NeedsBody %v", tmpl.String(), tmpl.NeedsBody())
	}
	v, ok, err := tmpl.Resolve(NewInput("POST", nil, "", nil))
	if v != "" || ok || err != nil {
		t.Fatalf("zero template Resolve = %q, %v, %v; want \"\", false, nil", v, ok, err)
	}
}

// FuzzParseTemplate checks that parsing never panics, that accepted
// templates keep their text and that their parts put together give it back.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{
		"{header.Idempotency-Key}", "{body.event.id}:{body.event.type}", "a{query.x}b{form.y}c",
		"{", "}", "{}", "{x.y}", "{header.}", "{body.a.#(b==1).c}", "tenant", "{header.a b}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tmpl, err := ParseTemplate(s)
		if err != nil {
			if !errors.Is(err, ErrTemplate) {
				t.Fatalf("error %v does not wrap ErrTemplate", err)
			}
			return
		}
		if tmpl.String() != s {
			t.Fatalf("String() = %q, want %q", tmpl.String(), s)
		}
		if len(tmpl.parts) == 0 {
			t.Fatalf("valid template %q has no parts", s)
		}
		var b strings.Builder
		n := 0
		for _, p := range tmpl.parts {
			switch p.src {
			case srcLiteral:
				if p.text == "" || strings.ContainsAny(p.text, "{}") {
					t.Fatalf("bad literal part %q in %q", p.text, s)
				}
				b.WriteString(p.text)
			default:
				if p.text == "" {
					t.Fatalf("empty placeholder name in %q", s)
				}
				n++
				b.WriteString("{" + p.src.String() + "." + p.text + "}")
			}
		}
		if n != tmpl.placeholders {
			t.Fatalf("placeholders = %d, counted %d", tmpl.placeholders, n)
		}
		// Header names are canonicalized, so compare case-insensitively.
		if !strings.EqualFold(b.String(), s) {
			t.Fatalf("parts rebuild %q, want %q", b.String(), s)
		}
		again, err := ParseTemplate(b.String())
		if err != nil {
			t.Fatalf("rebuilt template %q does not parse: %v", b.String(), err)
		}
		if len(again.parts) != len(tmpl.parts) {
			t.Fatalf("rebuilt template %q has %d parts, want %d", b.String(), len(again.parts), len(tmpl.parts))
		}
		// Resolving never panics, whatever the template.
		in := NewInput("POST", map[string][]string{"X": {"1"}}, "a=1", []byte(`{"a":1}`))
		if _, _, err := tmpl.Resolve(in); err != nil {
			t.Fatalf("Resolve over a valid body: %v", err)
		}
	})
}
