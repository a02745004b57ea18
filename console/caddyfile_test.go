package console

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	// The example Caddyfile has the idempotency handler beside the
	// console; the console itself does not import it.
	_ "github.com/idemgate/idemgate/caddymodule"
)

// TestCaddyfileInsideHandlePath: the directive needs no global order and
// sorts after basic_auth inside handle_path.
func TestCaddyfileInsideHandlePath(t *testing.T) {
	t.Parallel()
	src := `:8443 {
	handle_path /ops/* {
		idempotency_console {
			actor {http.request.header.Remote-User}
		}
		basic_auth {
			alice $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG
		}
	}
}`
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	for _, w := range warnings {
		if !strings.Contains(w.Message, "not formatted") {
			t.Errorf("warning: %v", w)
		}
	}
	js := string(out)
	auth, console := strings.Index(js, `"handler":"authentication"`), strings.Index(js, `"handler":"idempotency_console"`)
	if auth < 0 || console < 0 || auth > console {
		t.Fatalf("want authentication before idempotency_console:\n%s", js)
	}
	if !strings.Contains(js, `"actor":"{http.request.header.Remote-User}"`) {
		t.Fatalf("actor not set:\n%s", js)
	}
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
}

func TestUnmarshalCaddyfile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src  string
		want Console
		err  string
	}{
		{"idempotency_console", Console{}, ""},
		{"idempotency_console {\n csrf_secret {env.SECRET}\n actor {http.auth.user.id}\n}",
			Console{CSRFSecret: "{env.SECRET}", Actor: "{http.auth.user.id}"}, ""},
		{"idempotency_console extra", Console{}, "wrong argument count"},
		{"idempotency_console {\n colour red\n}", Console{}, "unrecognized idempotency_console option 'colour'"},
		{"idempotency_console {\n actor\n}", Console{}, "wrong argument count"},
		{"idempotency_console {\n allow_anonymous\n}", Console{AllowAnonymous: true}, ""},
		{"idempotency_console {\n allow_anonymous yes\n}", Console{}, "wrong argument count"},
	} {
		var c Console
		err := c.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.src))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.src, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, want %q", tc.src, err, tc.err)
		case tc.err == "" && (c.Actor != tc.want.Actor || c.CSRFSecret != tc.want.CSRFSecret || c.AllowAnonymous != tc.want.AllowAnonymous):
			t.Errorf("%q: %+v, want %+v", tc.src, c, tc.want)
		}
	}
}

// TestCaddyfileExampleConsoleBehindAuth: the example Caddyfile mounts the
// console behind basic_auth, so its actions name the signed-in user.
func TestCaddyfileExampleConsoleBehindAuth(t *testing.T) {
	t.Parallel()
	const file = "../Caddyfile.example"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": file})
	if err != nil {
		t.Fatalf("adapt %s: %v", file, err)
	}
	js := string(out)
	auth, console := strings.Index(js, `"handler":"authentication"`), strings.Index(js, `"handler":"idempotency_console"`)
	switch {
	case console < 0:
		t.Fatalf("%s mounts no console:\n%s", file, js)
	case auth < 0 || auth > console || !strings.Contains(js[auth:console], `"http_basic"`):
		t.Fatalf("%s: the console is not behind basic_auth:\n%s", file, js)
	case strings.Contains(js, "allow_anonymous"):
		t.Fatalf("%s lets anonymous operators act", file)
	}
}
