// Package bwlimit is upload-pending's bandwidth limit: the rclone-style
// syntax of --bwlimit and upload.bwlimit (a rate, or a weekly timetable of
// rates), and the Limiter that paces request bodies to it. One Limiter is
// shared by every batch of one process: the limit is per process.
package bwlimit

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rate is a limit in bytes per second; Off (0) is no limit.
type Rate int64

// Off is no limit.
const Off Rate = 0

// String is the rate for people: "2.0 MiB/s", or "off".
func (r Rate) String() string {
	if r <= 0 {
		return "off"
	}
	const unit = 1024
	if r < unit {
		return fmt.Sprintf("%d B/s", int64(r))
	}
	div, exp := int64(unit), 0
	for n := int64(r) / unit; n >= unit && exp < 3; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB/s", float64(r)/float64(div), "KMGT"[exp])
}

// Slot is one entry of a timetable: from Minute (minutes after midnight,
// local time) on Day (or every day when Day is EveryDay), Rate applies.
type Slot struct {
	Day    time.Weekday
	Minute int
	Rate   Rate
}

// EveryDay is the Day of a slot written without a weekday.
const EveryDay time.Weekday = -1

// Timetable is a parsed limit: one slot with no time for a plain rate,
// or slots in the order written. The zero Timetable is no limit.
type Timetable struct {
	slots []Slot
	fixed bool // a plain rate, no times
}

// Limited reports whether any slot limits anything: a timetable of "off"
// only, or the zero Timetable, never does.
func (t Timetable) Limited() bool {
	for _, s := range t.slots {
		if s.Rate > 0 {
			return true
		}
	}
	return false
}

// At is the rate in force at now. A slot without a weekday stands for
// the same time on every day; the last slot of the week before now is in
// force, wrapping round to the previous week's last slot before the first.
func (t Timetable) At(now time.Time) Rate {
	if len(t.slots) == 0 {
		return Off
	}
	if t.fixed {
		return t.slots[0].Rate
	}
	week := func(d time.Weekday, m int) int { return int(d)*24*60 + m }
	cur := week(now.Weekday(), now.Hour()*60+now.Minute())
	best, bestAt := Off, -1
	last, lastAt := Off, -1
	for _, s := range t.expanded() {
		at := week(s.Day, s.Minute)
		if at <= cur && at >= bestAt {
			best, bestAt = s.Rate, at
		}
		if at >= lastAt {
			last, lastAt = s.Rate, at
		}
	}
	if bestAt < 0 {
		return last
	}
	return best
}

// expanded is the slots with every-day slots written out for each day;
// of two slots at the same time, the one written later wins.
func (t Timetable) expanded() []Slot {
	var out []Slot
	for _, s := range t.slots {
		if s.Day != EveryDay {
			out = append(out, s)
			continue
		}
		for d := time.Sunday; d <= time.Saturday; d++ {
			out = append(out, Slot{Day: d, Minute: s.Minute, Rate: s.Rate})
		}
	}
	return out
}

// String is the timetable as written back: "2.0 MiB/s", or
// "08:00 512.0 KiB/s, 18:00 10.0 MiB/s, 23:00 off".
func (t Timetable) String() string {
	if len(t.slots) == 0 {
		return "off"
	}
	if t.fixed {
		return t.slots[0].Rate.String()
	}
	parts := make([]string, len(t.slots))
	for i, s := range t.slots {
		day := ""
		if s.Day != EveryDay {
			day = s.Day.String()[:3] + "-"
		}
		parts[i] = fmt.Sprintf("%s%02d:%02d %s", day, s.Minute/60, s.Minute%60, s.Rate)
	}
	return strings.Join(parts, ", ")
}

// Syntax says what a limit may be written as, for errors.
const Syntax = `a rate in bytes per second such as 512k, 10M or 1.5M (a plain number is KiB/s; units B, k, M, G are binary) or off, ` +
	`or a timetable such as "08:00,512k 18:00,10M 23:00,off" (a weekday may lead a time: "Mon-08:00,512k")`

// Parse reads a limit in rclone's syntax: a rate ("512k", "10M", "1.5M",
// "off", "0") or a timetable of space- or semicolon-separated
// "[WEEKDAY-]HH:MM,RATE" entries. Rates are bytes per second with binary
// multipliers (k = 1024); a plain number is KiB/s. The empty string is off.
func Parse(s string) (Timetable, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Timetable{}, nil
	}
	if !strings.Contains(s, ",") {
		r, err := ParseRate(s)
		if err != nil {
			return Timetable{}, err
		}
		return Timetable{slots: []Slot{{Day: EveryDay, Rate: r}}, fixed: true}, nil
	}
	var t Timetable
	for entry := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ' ' || r == ';' || r == '\t' }) {
		when, rate, ok := strings.Cut(entry, ",")
		if !ok {
			return Timetable{}, fmt.Errorf("timetable entry %q: want WEEKDAY-HH:MM,RATE or HH:MM,RATE", entry)
		}
		slot, err := parseWhen(when)
		if err != nil {
			return Timetable{}, fmt.Errorf("timetable entry %q: %w", entry, err)
		}
		if slot.Rate, err = ParseRate(rate); err != nil {
			return Timetable{}, fmt.Errorf("timetable entry %q: %w", entry, err)
		}
		t.slots = append(t.slots, slot)
	}
	return t, nil
}

var weekdays = map[string]time.Weekday{}

func init() {
	for d := time.Sunday; d <= time.Saturday; d++ {
		weekdays[strings.ToLower(d.String())] = d
		weekdays[strings.ToLower(d.String()[:3])] = d
	}
}

func parseWhen(s string) (Slot, error) {
	slot := Slot{Day: EveryDay}
	if day, hm, ok := strings.Cut(s, "-"); ok {
		d, known := weekdays[strings.ToLower(day)]
		if !known {
			return slot, fmt.Errorf("unknown weekday %q: want Mon..Sun or Monday..Sunday", day)
		}
		slot.Day, s = d, hm
	}
	h, m, ok := strings.Cut(s, ":")
	hh, herr := strconv.Atoi(h)
	mm, merr := strconv.Atoi(m)
	if !ok || herr != nil || merr != nil || len(m) != 2 || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return slot, fmt.Errorf("time %q: want HH:MM from 00:00 to 23:59", s)
	}
	slot.Minute = hh*60 + mm
	return slot, nil
}

// ParseRate reads one rate: "off", or a number with an optional binary
// unit (B, k/K, M, G, T; KiB/s when there is none), optionally followed by
// "i", "iB" or "B".
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "off") {
		return Off, nil
	}
	if strings.Contains(s, ":") {
		return 0, fmt.Errorf("rate %q: tilectl limits only what it sends; write the upload rate alone, such as 10M", s)
	}
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.TrimSuffix(strings.TrimSuffix(s[len(num):], "B"), "i")
	if unit == "" && strings.HasSuffix(s, "B") && !strings.HasSuffix(s, "iB") {
		unit = "B" // "100B": bytes
	}
	mult := map[string]float64{"": 1 << 10, "B": 1, "b": 1, "k": 1 << 10, "K": 1 << 10,
		"M": 1 << 20, "m": 1 << 20, "G": 1 << 30, "g": 1 << 30, "T": 1 << 40, "t": 1 << 40}
	if num == "" {
		return 0, fmt.Errorf("rate %q: want a number with an optional unit, such as 512k", s)
	}
	m, ok := mult[unit]
	if !ok {
		return 0, fmt.Errorf("rate %q: unknown unit %q: want B, k, M or G", s, s[len(num):])
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("rate %q: want a number with an optional unit, such as 512k", s)
	}
	if f < 0 {
		return 0, errors.New("rate must not be negative")
	}
	v := f * m
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("rate %q is too large", s)
	}
	if v > 0 && v < 1 {
		return 0, fmt.Errorf("rate %q is under 1 byte per second", s)
	}
	return Rate(v), nil
}

// Slots are the timetable's entries in the order written (a plain rate is
// one slot at 00:00 on every day).
func (t Timetable) Slots() []Slot { return slices.Clone(t.slots) }
