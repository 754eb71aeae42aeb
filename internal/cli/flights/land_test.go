package flights

import (
	"encoding/json"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/internal/teststation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// station runs the real tilectl on a real database, cache, FDR file and
// the reference provider.
type station struct{ *teststation.Station }

type result = teststation.Result

func newStation(t *testing.T) *station { return newStationWith(t, nil) }

// newStationWith is newStation with the provider's configuration edited.
func newStationWith(t *testing.T, edit func(*provider.Config)) *station {
	t.Helper()
	return &station{teststation.New(t, providertest.Start(t, edit).URL)}
}

// landed reads the flight.landed records back from the FDR file.
func (s *station) landed() []LandedPayload {
	s.T.Helper()
	out := s.MustRun("fdr", "tail", "--kind", LandedKind, "-o", "json", "--file", s.FDR)
	var ps []LandedPayload
	for _, line := range strings.Split(strings.TrimSpace(out.Stdout), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Kind    string        `json:"kind"`
			Payload LandedPayload `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Kind != LandedKind {
			s.T.Fatalf("fdr tail line %q: %v", line, err)
		}
		ps = append(ps, rec.Payload)
	}
	return ps
}

// flight is one flight of `flights list -o json`.
func (s *station) flight(id string) Flight {
	s.T.Helper()
	var r ListReport
	out := s.MustRun("flights", "list", "-o", "json")
	if err := json.Unmarshal([]byte(out.Stdout), &r); err != nil {
		s.T.Fatalf("flights list -o json: %v\n%s", err, out.Stdout)
	}
	for _, f := range r.Flights {
		if f.FlightID == id {
			return f
		}
	}
	s.T.Fatalf("flights list has no %s:\n%s", id, out.Stdout)
	return Flight{}
}

func TestLandingAnAirborneFlightRecordsItOnceAndUploadPendingThenSendsItsTiles(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	dir := t.TempDir()
	for i := range 5 {
		testbin.WriteTile(t, dir, i, uint8(i))
	}
	s.MustRun("tiles", "import", "--flight", "F1", "--state", "airborne", dir)

	// Airborne: a run over every flight skips it and sends nothing.
	skip := s.MustRun("upload-pending")
	if f := s.flight("F1"); f.State != "airborne" || f.Counts["pending"] != 5 || f.LastRun != nil {
		t.Fatalf("before landing: %+v\nupload-pending stderr: %s", f, skip.Stderr)
	}
	if !strings.Contains(skip.Stderr, "tilectl flights land ID") {
		t.Errorf("upload-pending does not say how to record the landing:\n%s", skip.Stderr)
	}

	before := time.Now().Add(-time.Minute) // the database's clock, within reason
	land := s.MustRun("flights", "land", "F1")
	if !strings.Contains(land.Stdout, "flight F1 landed: airborne -> on_ground") {
		t.Errorf("land says: %q", land.Stdout)
	}
	recs := s.landed()
	if len(recs) != 1 {
		t.Fatalf("%d landing records, want 1: %+v", len(recs), recs)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if p := recs[0]; p.FlightID != "F1" || p.PreviousState != "airborne" || p.User != me.Username || p.Host == "" ||
		p.LandedAt.Before(before) || p.LandedAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("landing record %+v, want F1 from airborne by %s", p, me.Username)
	}

	// Without --flight, the run now takes the landed flight.
	s.MustRun("upload-pending")
	f := s.flight("F1")
	if f.State != "on_ground" || f.Counts["uploaded"] != 5 || f.Counts["pending"] != 0 {
		t.Fatalf("after landing and a run without --flight: %+v", f)
	}
	if f.LastRun == nil || !f.LastRun.Finished || f.LastRun.Outcome == nil || *f.LastRun.Outcome != "success" {
		t.Fatalf("last run after the upload: %+v", f.LastRun)
	}

	// Landing again changes nothing and records nothing.
	again := s.MustRun("flights", "land", "F1")
	if !strings.Contains(again.Stdout, "already on_ground") {
		t.Errorf("second land says: %q", again.Stdout)
	}
	if recs := s.landed(); len(recs) != 1 {
		t.Fatalf("%d landing records after landing twice, want 1", len(recs))
	}
}

func TestLandingAnUnknownFlightIsRefusedWithWhatToDoAndRecordsNothing(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	r := s.Run("flights", "land", "F-NOPE")
	if r.Exit != 2 {
		t.Fatalf("exit %d, want 2\nstderr: %s", r.Exit, r.Stderr)
	}
	for _, want := range []string{"F-NOPE is not recorded", "tilectl flights list", "tilectl tiles import --flight F-NOPE"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	if recs := s.landed(); len(recs) != 0 {
		t.Fatalf("landing records for an unknown flight: %+v", recs)
	}
}
