package operation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// RetryExtensionURN names the retry extension in an error body's
// "extensions" list (docs/provider-api.md, "Errors and retry advice").
const RetryExtensionURN = "urn:forrst:ext:retry"

// Strategy is how a client spaces its retries.
type Strategy string

const (
	// StrategyImmediate retries without waiting.
	StrategyImmediate Strategy = "immediate"
	// StrategyFixed waits the same delay before every retry.
	StrategyFixed Strategy = "fixed"
	// StrategyExponential doubles the delay after every attempt.
	StrategyExponential Strategy = "exponential"
)

// Valid reports whether s is one of the three strategies the API defines.
func (s Strategy) Valid() bool {
	switch s {
	case StrategyImmediate, StrategyFixed, StrategyExponential:
		return true
	}
	return false
}

// MaxHintDelay is the longest delay a server hint (the extension's "after"
// or a Retry-After header) is parsed to. Longer hints are clamped here so
// the value stays far from time.Duration overflow when callers add it to a
// time; the uploader bounds it further by its cap on one wait and the
// run's deadline.
const MaxHintDelay = 100 * 365 * 24 * time.Hour

// maxHintAttempts bounds the extension's max_attempts; more is clamped.
const maxHintAttempts = 10000

// ErrInvalidRetryExtension is wrapped by every error that rejects the data
// of a retry extension.
var ErrInvalidRetryExtension = errors.New("invalid retry extension")

// RetryExtension is the data of the urn:forrst:ext:retry extension.
//
// Zero fields mean "not said": After == 0 means the body gave no "after"
// (or gave 0), Strategy == "" no strategy, MaxAttempts == 0 no limit.
type RetryExtension struct {
	Allowed     bool
	After       time.Duration
	Strategy    Strategy
	MaxAttempts int
	// Clamped is set by parsing when "after" or "max_attempts" exceeded
	// MaxHintDelay or the attempt ceiling and was cut down to it.
	Clamped bool
}

type wireDuration struct {
	Value json.RawMessage `json:"value"`
	Unit  string          `json:"unit"`
}

type wireRetry struct {
	Allowed     *bool           `json:"allowed"`
	After       *wireDuration   `json:"after,omitempty"`
	Strategy    *string         `json:"strategy,omitempty"`
	MaxAttempts json.RawMessage `json:"max_attempts,omitempty"`
}

var unitDurations = map[string]time.Duration{
	"millisecond": time.Millisecond,
	"second":      time.Second,
	"minute":      time.Minute,
}

// ParseRetryExtension decodes the extension's data object. Unknown fields
// are ignored; wrong types, a missing "allowed", an unknown unit or strategy,
// negative values and fractional attempt counts are errors. It never panics.
func ParseRetryExtension(data []byte) (RetryExtension, error) {
	var w wireRetry
	if err := json.Unmarshal(data, &w); err != nil {
		return RetryExtension{}, fmt.Errorf("%w: %v", ErrInvalidRetryExtension, err)
	}
	if w.Allowed == nil {
		return RetryExtension{}, fmt.Errorf("%w: \"allowed\" is required", ErrInvalidRetryExtension)
	}
	ext := RetryExtension{Allowed: *w.Allowed}
	if w.After != nil {
		d, clamped, err := parseWireDuration(*w.After)
		if err != nil {
			return RetryExtension{}, err
		}
		ext.After, ext.Clamped = d, clamped
	}
	if w.Strategy != nil {
		s := Strategy(*w.Strategy)
		if !s.Valid() {
			return RetryExtension{}, fmt.Errorf("%w: unknown strategy %q", ErrInvalidRetryExtension, *w.Strategy)
		}
		ext.Strategy = s
	}
	if w.MaxAttempts != nil && string(w.MaxAttempts) != "null" {
		n, clamped, err := parseAttempts(w.MaxAttempts)
		if err != nil {
			return RetryExtension{}, err
		}
		ext.MaxAttempts = n
		ext.Clamped = ext.Clamped || clamped
	}
	return ext, nil
}

func parseWireDuration(w wireDuration) (time.Duration, bool, error) {
	unit, ok := unitDurations[w.Unit]
	if !ok {
		return 0, false, fmt.Errorf("%w: unknown unit %q (want millisecond, second or minute)", ErrInvalidRetryExtension, w.Unit)
	}
	if !isJSONNumber(w.Value) {
		return 0, false, fmt.Errorf("%w: \"after\" value must be a number, got %.40s", ErrInvalidRetryExtension, w.Value)
	}
	// Float arithmetic cannot overflow the way int64 multiplication can;
	// anything past MaxHintDelay is clamped before converting back.
	v, err := strconv.ParseFloat(string(w.Value), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false, fmt.Errorf("%w: \"after\" value %s: %v", ErrInvalidRetryExtension, w.Value, err)
	}
	if v < 0 || math.IsNaN(v) {
		return 0, false, fmt.Errorf("%w: negative \"after\" value %s", ErrInvalidRetryExtension, w.Value)
	}
	ns := v * float64(unit)
	if ns >= float64(MaxHintDelay) || math.IsInf(ns, 0) {
		return MaxHintDelay, true, nil
	}
	return time.Duration(ns), false, nil
}

func parseAttempts(n json.RawMessage) (int, bool, error) {
	if !isJSONNumber(n) {
		return 0, false, fmt.Errorf("%w: max_attempts must be a number, got %.40s", ErrInvalidRetryExtension, n)
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if errors.Is(err, strconv.ErrRange) && len(n) > 0 && n[0] != '-' {
		return maxHintAttempts, true, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("%w: max_attempts %s is not an integer", ErrInvalidRetryExtension, n)
	}
	if v < 0 {
		return 0, false, fmt.Errorf("%w: negative max_attempts %d", ErrInvalidRetryExtension, v)
	}
	if v > maxHintAttempts {
		return maxHintAttempts, true, nil
	}
	return int(v), false, nil
}

// MarshalJSON produces the extension's data object. "after" is written in
// the largest unit that represents it exactly, and omitted when zero.
func (e RetryExtension) MarshalJSON() ([]byte, error) {
	allowed := e.Allowed
	w := wireRetry{Allowed: &allowed}
	if e.After > 0 {
		w.After = encodeDuration(e.After)
	}
	if e.Strategy != "" {
		s := string(e.Strategy)
		w.Strategy = &s
	}
	if e.MaxAttempts > 0 {
		w.MaxAttempts = json.RawMessage(strconv.Itoa(e.MaxAttempts))
	}
	return json.Marshal(w)
}

// UnmarshalJSON is ParseRetryExtension.
func (e *RetryExtension) UnmarshalJSON(b []byte) error {
	ext, err := ParseRetryExtension(b)
	if err != nil {
		return err
	}
	*e = ext
	return nil
}

func encodeDuration(d time.Duration) *wireDuration {
	switch {
	case d%time.Minute == 0:
		return &wireDuration{Value: json.RawMessage(strconv.FormatInt(int64(d/time.Minute), 10)), Unit: "minute"}
	case d%time.Second == 0:
		return &wireDuration{Value: json.RawMessage(strconv.FormatInt(int64(d/time.Second), 10)), Unit: "second"}
	case d%time.Millisecond == 0:
		return &wireDuration{Value: json.RawMessage(strconv.FormatInt(int64(d/time.Millisecond), 10)), Unit: "millisecond"}
	}
	// Sub-millisecond precision has no unit on the wire: a fraction keeps it.
	return &wireDuration{Value: json.RawMessage(strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)), Unit: "millisecond"}
}

// isJSONNumber reports whether raw (already validated JSON) is a number
// rather than a string, bool, null, array or object.
func isJSONNumber(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'))
}
