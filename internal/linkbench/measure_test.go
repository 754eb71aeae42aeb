package linkbench

import (
	"testing"
	"time"
)

// samplesAt builds meter samples every 100 ms from per-interval rates in
// bits/s.
func samplesAt(t0 time.Time, rates ...float64) []sample {
	s := []sample{{t0, 0}}
	var n int64
	for i, r := range rates {
		n += int64(r / 8 / 10)
		s = append(s, sample{t0.Add(time.Duration(i+1) * 100 * time.Millisecond), n})
	}
	return s
}

func TestRecovery(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rates := []float64{}
	for range 10 {
		rates = append(rates, 200e6)
	}
	for range 10 { // after the change at 1 s: slow, then fast from 2 s
		rates = append(rates, 10e6)
	}
	for range 10 {
		rates = append(rates, 200e6)
	}
	s := samplesAt(t0, rates...)
	change := t0.Add(time.Second)
	got, ok := recovery(s, change, t0.Add(3*time.Second), 500*time.Millisecond, 170e6)
	if !ok || got != 1500*time.Millisecond {
		t.Fatalf("recovery = %v, %v; want 1.5s (the first full window at the rate ends then)", got, ok)
	}
	if _, ok := recovery(s, change, t0.Add(2*time.Second), 500*time.Millisecond, 170e6); ok {
		t.Fatal("recovery found within a phase that never reaches the rate")
	}
}

func TestETAError(t *testing.T) {
	end := time.Unix(1000, 0)
	eta := func(f float64) *float64 { return &f }
	lines := []progressLine{
		{at: end.Add(-10 * time.Second), bytesDone: 10, bytesTotal: 100, eta: eta(1)},       // before 25%: ignored
		{at: end.Add(-8 * time.Second), bytesDone: 30, bytesTotal: 100, eta: eta(10)},       // 25% off
		{at: end.Add(-4 * time.Second), bytesDone: 60, bytesTotal: 100, eta: eta(4)},        // exact
		{at: end.Add(-400 * time.Millisecond), bytesDone: 90, bytesTotal: 100, eta: eta(9)}, // too near the end
	}
	got, ok := etaError(lines, end)
	if !ok || got != 0.25 {
		t.Fatalf("etaError = %v, %v; want 0.25", got, ok)
	}
	lines[2].eta = nil
	if got, _ := etaError(lines, end); got != 1 {
		t.Fatalf("a line with no ETA after 25%%: error %v, want 1", got)
	}
	if _, ok := etaError(lines[:1], end); ok {
		t.Fatal("etaError found a qualifying line among none")
	}
}

func TestSteadyRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rates := []float64{1e6} // a slow start
	for range 20 {
		rates = append(rates, 16e6)
	}
	rates = append(rates, 1e6) // and a slow end
	got := steadyRate(samplesAt(t0, rates...))
	if got < 1.9e6 || got > 2.1e6 { // 16 Mbit/s is 2 MB/s
		t.Fatalf("steadyRate = %.0f B/s, want about 2e6", got)
	}
}

func TestParseProgress(t *testing.T) {
	at := time.Unix(1000, 0)
	for _, c := range []struct {
		line    string
		ok      bool
		done    int64
		eta     float64
		haveETA bool
	}{
		{`{"level":"info","flight_id":"F","tiles_done":3,"tiles_total":10,"bytes_done":300,"bytes_total":1000,"eta_seconds":12.5,"message":"upload progress"}`, true, 300, 12.5, true},
		{`{"level":"info","bytes_done":300,"bytes_total":1000,"eta_seconds":null,"message":"upload progress"}`, true, 300, 0, false},
		{`{"level":"info","bytes_done":0,"bytes_total":null,"message":"upload progress"}`, false, 0, 0, false},
		{`{"level":"info","message":"claimed batch"}`, false, 0, 0, false},
	} {
		p, ok := parseProgress(c.line, at)
		if ok != c.ok || p.bytesDone != c.done || (p.eta != nil) != c.haveETA || (c.haveETA && *p.eta != c.eta) {
			t.Errorf("parseProgress(%s) = %+v, %v", c.line, p, ok)
		}
	}
}
