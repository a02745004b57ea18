package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/dustin/go-humanize"
	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as Caddy's durations are ("30s",
// "1h30m", "7d": caddy.ParseDuration). A bare number is an error in YAML
// and nanoseconds in JSON, as everywhere in Caddy; it marshals as "24h0m0s".
// Zero means "not set" and inherits (so in YAML an explicit zero is an error).
type Duration time.Duration

// String returns the duration as Go formats it, like "24h0m0s".
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON encodes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON decodes a duration string or a number of nanoseconds;
// null leaves d unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	return unmarshalJSON(b, d, parseDuration, `duration must be a string like "30s" or an integer number of nanoseconds`)
}

// UnmarshalYAML decodes a duration string; its errors are meant for the
// user as they are.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!str":
		v, err := parseDuration(n.Value)
		if err == nil && v == 0 {
			err = errors.New("must be positive, got 0s" + zeroHint)
		}
		*d = v
		return err
	case "!!int", "!!float":
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && f == 0 {
			return errors.New("must be positive, got 0" + zeroHint)
		}
		return fmt.Errorf("%s has no unit: write a Go duration such as 30s, 15m or 24h", n.Value)
	}
	return errors.New("must be a duration such as 30s or 24h, not " + describeNode(n))
}

// OptDuration is a Duration in which zero is a value ("0s": off), not
// "not set": fields of this type are pointers, and nil inherits.
type OptDuration time.Duration

// String returns the duration as Go formats it, like "720h0m0s".
func (d OptDuration) String() string { return time.Duration(d).String() }

// MarshalJSON encodes d as a Go duration string ("0s" for off).
func (d OptDuration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON decodes a duration string or a number of nanoseconds.
func (d *OptDuration) UnmarshalJSON(b []byte) error {
	return unmarshalJSON(b, d, func(s string) (OptDuration, error) {
		v, err := parseDuration(s)
		return OptDuration(v), err
	}, `duration must be a string like "30s" ("0s": off) or an integer number of nanoseconds`)
}

// UnmarshalYAML decodes a duration string, or 0 for off.
func (d *OptDuration) UnmarshalYAML(n *yaml.Node) error {
	if n.ShortTag() == "!!int" || n.ShortTag() == "!!float" {
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && f == 0 {
			*d = 0
			return nil
		}
	}
	if n.ShortTag() == "!!str" {
		v, err := parseDuration(n.Value)
		*d = OptDuration(v)
		return err
	}
	return new(Duration).UnmarshalYAML(n)
}

func parseDuration(s string) (Duration, error) {
	v, err := caddy.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%s is not a duration like 30s, 15m or 24h", quote(s))
	}
	return Duration(v), nil
}

// Size is a number of bytes, read from a number or text such as "1MiB" or
// "512KB" (go-humanize's ParseBytes) and marshalled as a number. Zero means
// "not set" and inherits (so in YAML an explicit zero is an error).
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
	if n, err := humanize.ParseBytes(s.String()); err == nil && s >= 0 && n == uint64(s) {
		return s.String()
	}
	return strconv.FormatInt(int64(s), 10) + " bytes"
}

// MarshalJSON encodes s as a number of bytes.
func (s Size) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, int64(s), 10), nil }

// UnmarshalJSON decodes a number of bytes or a size string like "1MiB";
// null leaves s unchanged.
func (s *Size) UnmarshalJSON(b []byte) error {
	return unmarshalJSON(b, s, parseSize, `size must be an integer number of bytes or a string like "1MiB"`)
}

// UnmarshalYAML decodes a number of bytes or a size string; its errors are
// meant for the user as they are.
func (s *Size) UnmarshalYAML(n *yaml.Node) (err error) {
	var f float64
	switch n.ShortTag() {
	case "!!str":
		*s, err = parseSize(n.Value)
	case "!!int":
		if n.Decode((*int64)(s)) != nil {
			err = errSizeRange
		}
	case "!!float":
		if n.Decode(&f); f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return fmt.Errorf("%s is not a whole number of bytes", n.Value)
		}
		*s = Size(f)
	default:
		return errors.New("must be a size such as 1MiB or 1048576, not " + describeNode(n))
	}
	if err == nil && *s == 0 {
		err = errors.New("must be positive, got 0" + zeroHint)
	}
	return err
}

const zeroHint = " (leave the field out to inherit the default)"

var errSizeRange = errors.New("size is too large")

func parseSize(str string) (Size, error) {
	n, err := humanize.ParseBytes(str)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s is not a size like 1MiB, 512KB or 1048576", quote(str))
	case n > math.MaxInt64:
		return 0, fmt.Errorf("%s: %w", quote(str), errSizeRange)
	}
	return Size(n), nil
}

// unmarshalJSON decodes a JSON string with parse, or an integer; null
// leaves v unchanged.
func unmarshalJSON[T ~int64](b []byte, v *T, parse func(string) (T, error), want string) error {
	var str string
	if string(b) == "null" {
		return nil
	} else if json.Unmarshal(b, &str) == nil {
		n, err := parse(str)
		*v = n
		return err
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("%s, not %s", want, b)
	}
	*v = T(n)
	return nil
}
