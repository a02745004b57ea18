package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// Duration is a time.Duration that reads and writes Go duration text.
//
// In YAML it is a Go duration string such as "30s", "24h" or "1h30m"; a
// bare number is rejected, because it would silently mean nanoseconds. In
// JSON it is such a string or an integer number of nanoseconds (as Caddy's
// own durations). It marshals to JSON as a string like "24h0m0s".
// Zero means "not set": the field inherits its default (so in YAML an
// explicit zero is an error).
type Duration time.Duration

// String returns the duration as Go formats it, like "24h0m0s".
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON encodes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON decodes a Go duration string or a number of nanoseconds;
// null leaves d unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := parseDuration(s)
		if err != nil {
			return err
		}
		*d = v
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("duration must be a string like \"30s\" or an integer number of nanoseconds, not %s", b)
	}
	*d = Duration(n)
	return nil
}

// parseDuration parses Go duration text, with a hint for a common mistake.
func parseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		hint := ""
		if strings.HasSuffix(strings.TrimSpace(s), "d") {
			hint = " (days are not a Go duration unit: write 720h for 30 days)"
		}
		return 0, fmt.Errorf("%s is not a duration like 30s, 15m or 24h%s", quote(s), hint)
	}
	return Duration(v), nil
}

// Size is a number of bytes. It reads a number or text such as "1MiB"
// (1048576), "512KB" (512000) or "1048576", as understood by
// github.com/dustin/go-humanize's ParseBytes, and marshals to JSON as a
// plain number. Zero means "not set": the field inherits its default (so in
// YAML an explicit zero is an error).
type Size int64

// String returns the size in IEC units, like "1.0 MiB".
func (s Size) String() string {
	if s < 0 {
		return strconv.FormatInt(int64(s), 10) + " B"
	}
	return humanize.IBytes(uint64(s))
}

// text returns the size in IEC units when that is exact ("64 MiB"), else
// in bytes ("67108865 bytes").
func (s Size) text() string {
	if t := s.String(); s >= 0 {
		if n, err := humanize.ParseBytes(t); err == nil && n == uint64(s) {
			return t
		}
	}
	return strconv.FormatInt(int64(s), 10) + " bytes"
}

// MarshalJSON encodes s as a number of bytes.
func (s Size) MarshalJSON() ([]byte, error) {
	return strconv.AppendInt(nil, int64(s), 10), nil
}

// UnmarshalJSON decodes a number of bytes or a size string like "1MiB";
// null leaves s unchanged.
func (s *Size) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		v, err := parseSize(str)
		if err != nil {
			return err
		}
		*s = v
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("size must be an integer number of bytes or a string like \"1MiB\", not %s", b)
	}
	*s = Size(n)
	return nil
}

var errSizeRange = errors.New("size is too large")

// parseSize parses a size string with go-humanize.
func parseSize(str string) (Size, error) {
	n, err := humanize.ParseBytes(str)
	if err != nil {
		return 0, fmt.Errorf("%s is not a size like 1MiB, 512KB or 1048576", quote(str))
	}
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("%s: %w", quote(str), errSizeRange)
	}
	return Size(n), nil
}
