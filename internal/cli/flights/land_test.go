package flights

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// station runs the real tilectl on a real database, cache, FDR file and
// the reference provider.
type station struct {
	t   *testing.T
	bin string
	fdr string
	env []string
	// db is the station's database URL, cache its cache directory.
	db, cache string
}

func newStation(t *testing.T) *station { return newStationWith(t, nil) }

// newStationWith is newStation with the provider's configuration edited.
func newStationWith(t *testing.T, edit func(*provider.Config)) *station {
	t.Helper()
	prov := providertest.Start(t, edit)
	root := t.TempDir()
	s := &station{t: t, bin: testbin.Tilectl(t), fdr: filepath.Join(root, "fdr.ring"), env: testbin.Environ("XDG_", "HOME="),
		db: pgtest.NewURL(t), cache: filepath.Join(root, "cache")}
	s.env = append(s.env, "HOME="+root, "XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"TILECTL_DATABASE_URL="+s.db, "TILECTL_CACHE_DIR="+s.cache,
		"TILECTL_FDR_PATH="+s.fdr, "TILECTL_PROVIDER_URL="+prov.URL, "TILECTL_PROVIDER_TOKEN="+providertest.Token)
	s.mustRun("migrate", "up")
	return s
}

type result struct {
	exit           int
	stdout, stderr string
}

func (s *station) run(args ...string) result {
	s.t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(s.bin, args...)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if took := testbin.RunFor(s.t, cmd, 2*time.Minute); took >= 2*time.Minute {
		s.t.Fatalf("tilectl %s: timed out", strings.Join(args, " "))
	}
	return result{exit: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func (s *station) mustRun(args ...string) result {
	s.t.Helper()
	r := s.run(args...)
	if r.exit != 0 {
		s.t.Fatalf("tilectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.exit, r.stdout, r.stderr)
	}
	return r
}

// landed reads the flight.landed records back from the FDR file.
func (s *station) landed() []LandedPayload {
	s.t.Helper()
	out := s.mustRun("fdr", "tail", "--kind", LandedKind, "-o", "json", "--file", s.fdr)
	var ps []LandedPayload
	for _, line := range strings.Split(strings.TrimSpace(out.stdout), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Kind    string        `json:"kind"`
			Payload LandedPayload `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Kind != LandedKind {
			s.t.Fatalf("fdr tail line %q: %v", line, err)
		}
		ps = append(ps, rec.Payload)
	}
	return ps
}

// flight is one flight of `flights list -o json`.
func (s *station) flight(id string) Flight {
	s.t.Helper()
	var r ListReport
	out := s.mustRun("flights", "list", "-o", "json")
	if err := json.Unmarshal([]byte(out.stdout), &r); err != nil {
		s.t.Fatalf("flights list -o json: %v\n%s", err, out.stdout)
	}
	for _, f := range r.Flights {
		if f.FlightID == id {
			return f
		}
	}
	s.t.Fatalf("flights list has no %s:\n%s", id, out.stdout)
	return Flight{}
}

func TestLandingAnAirborneFlightRecordsItOnceAndUploadPendingThenSendsItsTiles(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	dir := t.TempDir()
	for i := range 5 {
		testbin.WriteTile(t, dir, i, uint8(i))
	}
	s.mustRun("tiles", "import", "--flight", "F1", "--state", "airborne", dir)

	// Airborne: a run over every flight skips it and sends nothing.
	skip := s.mustRun("upload-pending")
	if f := s.flight("F1"); f.State != "airborne" || f.Counts["pending"] != 5 || f.LastRun != nil {
		t.Fatalf("before landing: %+v\nupload-pending stderr: %s", f, skip.stderr)
	}
	if !strings.Contains(skip.stderr, "tilectl flights land ID") {
		t.Errorf("upload-pending does not say how to record the landing:\n%s", skip.stderr)
	}

	before := time.Now().Add(-time.Minute) // the database's clock, within reason
	land := s.mustRun("flights", "land", "F1")
	if !strings.Contains(land.stdout, "flight F1 landed: airborne -> on_ground") {
		t.Errorf("land says: %q", land.stdout)
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
	s.mustRun("upload-pending")
	f := s.flight("F1")
	if f.State != "on_ground" || f.Counts["uploaded"] != 5 || f.Counts["pending"] != 0 {
		t.Fatalf("after landing and a run without --flight: %+v", f)
	}
	if f.LastRun == nil || !f.LastRun.Finished || f.LastRun.Outcome == nil || *f.LastRun.Outcome != "success" {
		t.Fatalf("last run after the upload: %+v", f.LastRun)
	}

	// Landing again changes nothing and records nothing.
	again := s.mustRun("flights", "land", "F1")
	if !strings.Contains(again.stdout, "already on_ground") {
		t.Errorf("second land says: %q", again.stdout)
	}
	if recs := s.landed(); len(recs) != 1 {
		t.Fatalf("%d landing records after landing twice, want 1", len(recs))
	}
}

func TestLandingAnUnknownFlightIsRefusedWithWhatToDoAndRecordsNothing(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	r := s.run("flights", "land", "F-NOPE")
	if r.exit != 2 {
		t.Fatalf("exit %d, want 2\nstderr: %s", r.exit, r.stderr)
	}
	for _, want := range []string{"F-NOPE is not recorded", "tilectl flights list", "tilectl tiles import --flight F-NOPE"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if recs := s.landed(); len(recs) != 0 {
		t.Fatalf("landing records for an unknown flight: %+v", recs)
	}
}
