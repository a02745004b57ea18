package operator

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemgate/idemgate/store"
)

// TestToolCall: the arguments are kept redacted, on one line, and cut
// at a character's start with a marker past store.MaxToolArguments;
// nothing that is not JSON is kept.
func TestToolCall(t *testing.T) {
	red := NewRedactor([]string{"iban"})
	for _, tc := range []struct{ name, args, want string }{
		{"redacted", `{ "to": "a@example.com", "apiKey": "k1", "nested": {"private_key": "pk", "list": [{"client_secret": "s"}]}, "iban": "DE89" }`,
			`{"to":"a@example.com","apiKey":"[redacted]","nested":{"private_key":"[redacted]","list":[{"client_secret":"[redacted]"}]},"iban":"[redacted]"}`},
		{"a string holding JSON", `{"payload":"{\"password\":\"p\"}"}`, `{"payload":"{\"password\":\"[redacted]\"}"}`},
		{"none", ``, ``},
		{"not JSON", `{"a":`, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := red.ToolCall("send", []byte(tc.args)); c.Tool != "send" || c.Arguments != tc.want {
				t.Fatalf("ToolCall = %+v, want arguments %s", c, tc.want)
			}
		})
	}
	long := red.ToolCall("send", []byte(`{"body":"`+strings.Repeat("€", 2000)+`"}`))
	head, marker, ok := strings.Cut(long.Arguments, "… (cut: 6011 bytes in all)")
	if !ok || marker != "" || len(head) > store.MaxToolArguments || len(head) < store.MaxToolArguments-3 || !utf8.ValidString(head) {
		t.Fatalf("long arguments kept as %d bytes, ending %q", len(long.Arguments), long.Arguments[len(long.Arguments)-40:])
	}
	if got := store.DecodeToolCall(store.EncodeToolCall(long)); got == nil || *got != *long {
		t.Fatalf("round trip: %+v", got)
	}
	if store.DecodeToolCall(nil) != nil || store.DecodeToolCall([]byte("{")) != nil || store.EncodeToolCall(nil) != nil {
		t.Fatal("nil and malformed stored forms decode to a tool call")
	}
}

// TestToolArguments: a view redacts the kept arguments again, so a field
// named in redact_fields after the call was stored is hidden too, lays
// them out with the view's indent, and shows cut arguments as they were
// kept.
func TestToolArguments(t *testing.T) {
	kept := NewRedactor(nil).ToolCall("send", []byte(`{"iban":"DE89","token":"t"}`))
	if got, want := NewRedactor([]string{"iban"}).ToolArguments(kept, ""), `{"iban":"[redacted]","token":"[redacted]"}`; got != want {
		t.Errorf("ToolArguments = %s, want %s", got, want)
	}
	if got, want := NewRedactor(nil).ToolArguments(kept, " "), "{\n \"iban\": \"DE89\",\n \"token\": \"[redacted]\"\n}"; got != want {
		t.Errorf("ToolArguments with an indent = %q, want %q", got, want)
	}
	cut := store.NewToolCall("send", `{"body":"`+strings.Repeat("x", store.MaxToolArguments)+`"}`)
	if got := NewRedactor(nil).ToolArguments(cut, "  "); got != cut.Arguments {
		t.Errorf("cut arguments shown as %q…, want them as kept", got[:40])
	}
}
