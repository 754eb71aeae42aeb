package operation

import (
	"net/http"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"5", 5 * time.Second, true},
		{" 120 ", 120 * time.Second, true},
		{"0", 0, true},
		{t0.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Sat, 21 Nov 2026 10:00:30 GMT", 30 * time.Second, true},
		{"Saturday, 21-Nov-26 10:00:30 GMT", 30 * time.Second, true}, // RFC 850
		{"Sat Nov 21 10:00:30 2026", 30 * time.Second, true},         // asctime
		{t0.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"Mon, 01 Jan 0001 00:00:00 GMT", 0, true},
		{"Fri, 31 Dec 9999 23:59:59 GMT", MaxHintDelay, true},
		{"1743552000", 1743552000 * time.Second, true}, // 55 years: kept, callers bound it
		{"99999999999999999999999999", MaxHintDelay, true},
		{"3153600000", 3153600000 * time.Second, true}, // exactly MaxHintDelay
		{"", 0, false},
		{"-5", 0, false},
		{"5.5", 0, false},
		{"+5", 0, false},
		{"soon", 0, false},
		{"5s", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, t0)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"5", "Sat, 21 Nov 2026 10:00:30 GMT", "99999999999999999999", "-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseRetryAfter(s, t0)
		if d < 0 || d > MaxHintDelay || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", s, d, ok)
		}
		if ok && isDigits(s) {
			// Delta-seconds round-trip through their decimal form.
			back, ok2 := ParseRetryAfter(itoa(int64(d/time.Second)), t0)
			if !ok2 || back != d {
				t.Fatalf("round trip %v -> %v", d, back)
			}
		}
	})
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}
