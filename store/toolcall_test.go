package store

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestNewToolCall: the arguments are kept redacted, on one line, and cut
// at a character's start with a marker past MaxToolArguments; nothing
// that is not JSON is kept.
func TestNewToolCall(t *testing.T) {
	red := NewRedactor([]string{"iban"})
	for _, tc := range []struct{ name, args, want string }{
		{"redacted", `{ "to": "a@example.com", "apiKey": "k1", "nested": {"private_key": "pk", "list": [{"client_secret": "s"}]}, "iban": "DE89" }`,
			`{"to":"a@example.com","apiKey":"[redacted]","nested":{"private_key":"[redacted]","list":[{"client_secret":"[redacted]"}]},"iban":"[redacted]"}`},
		{"a string holding JSON", `{"payload":"{\"password\":\"p\"}"}`, `{"payload":"{\"password\":\"[redacted]\"}"}`},
		{"none", ``, ``},
		{"not JSON", `{"a":`, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := NewToolCall("send", []byte(tc.args), red); c.Tool != "send" || c.Arguments != tc.want {
				t.Fatalf("NewToolCall = %+v, want arguments %s", c, tc.want)
			}
		})
	}
	long := NewToolCall("send", []byte(`{"body":"`+strings.Repeat("€", 2000)+`"}`), red)
	head, marker, ok := strings.Cut(long.Arguments, "… (cut: 6011 bytes in all)")
	if !ok || marker != "" || len(head) > MaxToolArguments || len(head) < MaxToolArguments-3 || !utf8.ValidString(head) {
		t.Fatalf("long arguments kept as %d bytes, ending %q", len(long.Arguments), long.Arguments[len(long.Arguments)-40:])
	}
	if got := DecodeToolCall(EncodeToolCall(long)); got == nil || *got != *long {
		t.Fatalf("round trip: %+v", got)
	}
	if DecodeToolCall(nil) != nil || DecodeToolCall([]byte("{")) != nil || EncodeToolCall(nil) != nil {
		t.Fatal("nil and malformed stored forms decode to a tool call")
	}
}
