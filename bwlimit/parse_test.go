package bwlimit

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Rate
	}{
		{"off", Off}, {"OFF", Off}, {"0", Off}, {"", Off},
		{"512", 512 << 10}, {"512k", 512 << 10}, {"512K", 512 << 10}, {"512KiB", 512 << 10},
		{"10M", 10 << 20}, {"1.5M", 3 << 19}, {"2M", 2 << 20}, {"1G", 1 << 30}, {"100B", 100}, {"100b", 100},
		{"0.625M", 655360},
	} {
		tt, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := tt.At(time.Now()); got != tc.want {
			t.Errorf("Parse(%q) = %d B/s, want %d", tc.in, got, tc.want)
		}
	}
}

func TestParseRejectsWithTheReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"10X", `unknown unit "X"`},
		{"fast", "want a number"},
		{"-5M", "negative"},
		{"10M:1M", "write the upload rate alone"},
		{"08:00,512k 25:00,1M", `time "25:00"`},
		{"Mond-08:00,512k", `unknown weekday "Mond"`},
		{"08:00,512k 10M", `timetable entry "10M"`},
		{"08:00,lots", `timetable entry "08:00,lots"`},
		{"8:0,1M", `time "8:0"`},
	} {
		_, err := Parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

func TestRateString(t *testing.T) {
	t.Parallel()
	for r, want := range map[Rate]string{Off: "off", 100: "100 B/s", 512 << 10: "512.0 KiB/s", 2 << 20: "2.0 MiB/s", 3 << 19: "1.5 MiB/s"} {
		if got := r.String(); got != want {
			t.Errorf("Rate(%d) = %q, want %q", int64(r), got, want)
		}
	}
}

// at is a local time on the given weekday of a fixed week.
func at(day time.Weekday, hh, mm int) time.Time {
	// 2026-11-22 is a Sunday.
	return time.Date(2026, 11, 22+int(day), hh, mm, 0, 0, time.Local)
}

func TestTimetableAt(t *testing.T) {
	t.Parallel()
	daily, err := Parse("08:00,512k 18:00,10M 23:00,off")
	if err != nil {
		t.Fatal(err)
	}
	weekly, err := Parse("Mon-08:00,512k;Fri-18:00,10M Saturday-00:00,off")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tt   Timetable
		now  time.Time
		want Rate
	}{
		{"before the first slot: the day before's last", daily, at(time.Tuesday, 7, 59), Off},
		{"at a slot's minute", daily, at(time.Tuesday, 8, 0), 512 << 10},
		{"between slots", daily, at(time.Tuesday, 17, 59), 512 << 10},
		{"evening", daily, at(time.Tuesday, 18, 0), 10 << 20},
		{"night", daily, at(time.Tuesday, 23, 30), Off},
		{"Sunday wraps to Saturday's slot", weekly, at(time.Sunday, 12, 0), Off},
		{"Monday before 08:00 wraps too", weekly, at(time.Monday, 7, 0), Off},
		{"Monday morning", weekly, at(time.Monday, 8, 0), 512 << 10},
		{"Thursday", weekly, at(time.Thursday, 20, 0), 512 << 10},
		{"Friday evening", weekly, at(time.Friday, 18, 30), 10 << 20},
	} {
		if got := tc.tt.At(tc.now); got != tc.want {
			t.Errorf("%s: At(%s) = %s, want %s", tc.name, tc.now.Format("Mon 15:04"), got, tc.want)
		}
	}
}
