package operation

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestParseRetryExtension(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    RetryExtension
		wantErr bool
	}{
		{`{"allowed":true,"after":{"value":5,"unit":"second"},"strategy":"fixed","max_attempts":3}`,
			RetryExtension{Allowed: true, After: 5 * time.Second, Strategy: StrategyFixed, MaxAttempts: 3}, false},
		{`{"allowed":false}`, RetryExtension{}, false},
		{`{"allowed":true,"after":{"value":250,"unit":"millisecond"}}`, RetryExtension{Allowed: true, After: 250 * time.Millisecond}, false},
		{`{"allowed":true,"after":{"value":2,"unit":"minute"},"strategy":"exponential"}`, RetryExtension{Allowed: true, After: 2 * time.Minute, Strategy: StrategyExponential}, false},
		{`{"allowed":true,"after":{"value":1.5,"unit":"second"}}`, RetryExtension{Allowed: true, After: 1500 * time.Millisecond}, false},
		{`{"allowed":true,"future":{"x":1},"strategy":"immediate"}`, RetryExtension{Allowed: true, Strategy: StrategyImmediate}, false},
		{`{"allowed":true,"after":null,"max_attempts":null}`, RetryExtension{Allowed: true}, false},
		// 484289 hours in minutes fits a Duration and is kept as is.
		{`{"allowed":true,"after":{"value":29057340,"unit":"minute"}}`, RetryExtension{Allowed: true, After: 484289 * time.Hour}, false},
		// Past MaxHintDelay and past int64 nanoseconds: clamped, flagged.
		{`{"allowed":true,"after":{"value":9999999999999,"unit":"minute"}}`, RetryExtension{Allowed: true, After: MaxHintDelay, Clamped: true}, false},
		{`{"allowed":true,"after":{"value":1e400,"unit":"second"}}`, RetryExtension{Allowed: true, After: MaxHintDelay, Clamped: true}, false},
		{`{"allowed":true,"max_attempts":99999999999999999999999}`, RetryExtension{Allowed: true, MaxAttempts: maxHintAttempts, Clamped: true}, false},
		{`{}`, RetryExtension{}, true},
		{`{"allowed":"true"}`, RetryExtension{}, true},
		{`{"allowed":true,"after":{"value":5,"unit":"hour"}}`, RetryExtension{}, true},
		{`{"allowed":true,"after":{"value":-1,"unit":"second"}}`, RetryExtension{}, true},
		{`{"allowed":true,"after":{"value":-1e400,"unit":"second"}}`, RetryExtension{}, true},
		{`{"allowed":true,"after":{"value":"5","unit":"second"}}`, RetryExtension{}, true},
		{`{"allowed":true,"after":{"unit":"second"}}`, RetryExtension{}, true},
		{`{"allowed":true,"after":5}`, RetryExtension{}, true},
		{`{"allowed":true,"strategy":"linear"}`, RetryExtension{}, true},
		{`{"allowed":true,"strategy":7}`, RetryExtension{}, true},
		{`{"allowed":true,"max_attempts":-2}`, RetryExtension{}, true},
		{`{"allowed":true,"max_attempts":2.5}`, RetryExtension{}, true},
		{`{"allowed":true,"max_attempts":"3"}`, RetryExtension{}, true},
		{`[]`, RetryExtension{}, true},
		{``, RetryExtension{}, true},
		{`{"allowed":true}x`, RetryExtension{}, true},
	}
	for _, tt := range tests {
		got, err := ParseRetryExtension([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseRetryExtension(%s) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil && !errors.Is(err, ErrInvalidRetryExtension) {
			t.Errorf("ParseRetryExtension(%s) error %v does not wrap ErrInvalidRetryExtension", tt.in, err)
		}
		if got != tt.want {
			t.Errorf("ParseRetryExtension(%s) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestRetryExtensionMarshalsTheWireShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ext  RetryExtension
		want string
	}{
		{RetryExtension{Allowed: true, After: 5 * time.Second, Strategy: StrategyFixed, MaxAttempts: 3},
			`{"allowed":true,"after":{"value":5,"unit":"second"},"strategy":"fixed","max_attempts":3}`},
		{RetryExtension{Allowed: false}, `{"allowed":false}`},
		{RetryExtension{Allowed: true, After: 2 * time.Minute}, `{"allowed":true,"after":{"value":2,"unit":"minute"}}`},
		{RetryExtension{Allowed: true, After: 1500 * time.Millisecond}, `{"allowed":true,"after":{"value":1500,"unit":"millisecond"}}`},
		{RetryExtension{Allowed: true, After: 1500 * time.Microsecond}, `{"allowed":true,"after":{"value":1.5,"unit":"millisecond"}}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.ext)
		if err != nil || string(b) != tt.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tt.ext, b, err, tt.want)
			continue
		}
		back, err := ParseRetryExtension(b)
		if err != nil || back != tt.ext {
			t.Errorf("round trip of %+v = %+v, %v", tt.ext, back, err)
		}
	}
}

func FuzzParseRetryExtension(f *testing.F) {
	f.Add([]byte(`{"allowed":true,"after":{"value":5,"unit":"second"},"strategy":"fixed","max_attempts":3}`))
	f.Add([]byte(`{"allowed":true,"after":{"value":1e400,"unit":"minute"}}`))
	f.Add([]byte(`{"allowed":false}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ext, err := ParseRetryExtension(b)
		if err != nil {
			return
		}
		if ext.After < 0 || ext.After > MaxHintDelay || ext.MaxAttempts < 0 || ext.MaxAttempts > maxHintAttempts {
			t.Fatalf("out of range: %+v", ext)
		}
		if ext.Strategy != "" && !ext.Strategy.Valid() {
			t.Fatalf("invalid strategy %q accepted", ext.Strategy)
		}
		out, err := json.Marshal(ext)
		if err != nil {
			t.Fatalf("marshal %+v: %v", ext, err)
		}
		back, err := ParseRetryExtension(out)
		if err != nil {
			t.Fatalf("reparse %s: %v", out, err)
		}
		back.Clamped, ext.Clamped = false, false
		// Float parsing may land a fraction of a nanosecond off; the wire
		// form written back is exact, so a second trip must be stable.
		if back.Allowed != ext.Allowed || back.Strategy != ext.Strategy || back.MaxAttempts != ext.MaxAttempts || absDur(back.After-ext.After) > time.Microsecond {
			t.Fatalf("round trip %+v -> %s -> %+v", ext, out, back)
		}
	})
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
