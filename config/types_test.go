package config

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`"24h"`, 24 * time.Hour, false},
		{`"1h30m"`, 90 * time.Minute, false},
		{`"250ms"`, 250 * time.Millisecond, false},
		{`30000000000`, 30 * time.Second, false},
		{` "5s" `, 5 * time.Second, false},
		{`null`, 7, false}, // leaves the value alone
		{`"30"`, 0, true},
		{`"3d"`, 72 * time.Hour, false}, // days, as caddy.Duration
		{`"1d12h"`, 36 * time.Hour, false},
		{`1.5`, 0, true},
		{`true`, 0, true},
		{`"1h`, 0, true},
	}
	for _, tt := range tests {
		d := Duration(7)
		err := json.Unmarshal([]byte(tt.in), &d)
		if (err != nil) != tt.wantErr {
			t.Errorf("Unmarshal(%s) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && time.Duration(d) != tt.want {
			t.Errorf("Unmarshal(%s) = %v, want %v", tt.in, time.Duration(d), tt.want)
		}
	}

	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{24 * time.Hour, `"24h0m0s"`},
		{1500 * time.Millisecond, `"1.5s"`},
		{0, `"0s"`},
	} {
		b, err := json.Marshal(Duration(tt.d))
		if err != nil || string(b) != tt.want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tt.d, b, err, tt.want)
		}
		var back Duration
		if err := json.Unmarshal(b, &back); err != nil || time.Duration(back) != tt.d {
			t.Errorf("round trip of %v = %v, %v", tt.d, time.Duration(back), err)
		}
	}
	if s := Duration(90 * time.Second).String(); s != "1m30s" {
		t.Errorf("String() = %q", s)
	}
}

func TestSizeJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{`1048576`, 1 << 20, false},
		{`"1MiB"`, 1 << 20, false},
		{`"512KB"`, 512000, false},
		{`"512 kib"`, 512 << 10, false},
		{`"1048576"`, 1 << 20, false},
		{`"1.5KiB"`, 1536, false},
		{`"2GB"`, 2000000000, false},
		{`null`, 7, false},
		{`-1`, -1, false}, // decodes; Validate rejects it
		{`"lots"`, 0, true},
		{`"-1"`, 0, true},
		{`"16EiB"`, 0, true},
		{`"8EiB"`, 0, true}, // 2^63 does not fit an int64
		{`1.5`, 0, true},
		{`1e3`, 0, true},
		{`[1]`, 0, true},
	}
	for _, tt := range tests {
		s := Size(7)
		err := json.Unmarshal([]byte(tt.in), &s)
		if (err != nil) != tt.wantErr {
			t.Errorf("Unmarshal(%s) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && int64(s) != tt.want {
			t.Errorf("Unmarshal(%s) = %d, want %d", tt.in, int64(s), tt.want)
		}
	}
	b, err := json.Marshal(Size(1 << 20))
	if err != nil || string(b) != "1048576" {
		t.Errorf("Marshal = %s, %v", b, err)
	}
	for s, want := range map[Size]string{1 << 20: "1.0 MiB", 512: "512 B", -3: "-3 B"} {
		if got := s.String(); got != want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(s), got, want)
		}
	}
}

// TestSizesAndDurationsInYAML covers the YAML spellings of sizes and
// durations, through the decode hook.
func TestSizesAndDurationsInYAML(t *testing.T) {
	tests := []struct {
		value   string // YAML value of max_response / ttl
		size    int64
		dur     time.Duration
		wantErr string
	}{
		{value: "1MiB", size: 1 << 20},
		{value: "512KB", size: 512000},
		{value: "\"1 MB\"", size: 1000000},
		{value: "1048576", size: 1 << 20},
		{value: "\"1048576\"", size: 1 << 20},
		{value: "1kib", size: 1024},
		{value: "2.0", size: 2},
		{value: "64MiB", size: 64 << 20},
		{value: "9223372036854775807", size: 1<<63 - 1}, // max_response has no cap
		{value: "9223372036854775808", wantErr: "size is too large"},
		{value: "30s", dur: 30 * time.Second},
		{value: "1h30m", dur: 90 * time.Minute},
		{value: "\"720h\"", dur: 720 * time.Hour},
		{value: "1.5h", dur: 90 * time.Minute},
		{value: "30d", dur: 720 * time.Hour}, // days, as in the Caddyfile
		{value: "1d12h", dur: 36 * time.Hour},
	}
	for _, tt := range tests {
		field := "max_response"
		if tt.dur != 0 {
			field = "ttl"
		}
		doc := "routes:\n" + route + "    " + field + ": " + tt.value + "\n"
		r, err := Parse("r.yaml", []byte(doc), Limits{})
		if tt.wantErr != "" {
			want := "r.yaml:5: routes[0]." + field + ": " + tt.wantErr
			if err == nil || err.Error() != want {
				t.Errorf("%s: %s: error = %v, want %s", field, tt.value, err, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %s: %v", field, tt.value, err)
			continue
		}
		if got := r.Routes[0].MaxResponse; tt.dur == 0 && int64(got) != tt.size {
			t.Errorf("max_response: %s = %d, want %d", tt.value, int64(got), tt.size)
		}
		if got := r.Routes[0].TTL; tt.dur != 0 && time.Duration(got) != tt.dur {
			t.Errorf("ttl: %s = %v, want %v", tt.value, time.Duration(got), tt.dur)
		}
	}
}
