package flights

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
)

// listFixture records three flights:
//   - A: on_ground, 4 tiles of 100 bytes (2 uploaded, 1 pending, 1 given
//     up), two runs: a failed one and, newer, a successful one;
//   - B: airborne, 3 tiles of 1,000 bytes (2 trusted, 1 rejected), one
//     run that never recorded its end;
//   - C: on_ground, no tiles, never run.
//
// It returns the store and the time the flights were recorded at.
func listFixture(t *testing.T) (*tilestore.Store, time.Time) {
	t.Helper()
	ctx := context.Background()
	pool, _ := pgtest.New(t)
	s := tilestore.NewStore(pool)
	for id, st := range map[string]tilestore.FlightState{"A": tilestore.FlightOnGround, "B": tilestore.FlightAirborne, "C": tilestore.FlightOnGround} {
		if _, err := s.UpsertFlight(ctx, id, st); err != nil {
			t.Fatal(err)
		}
	}
	recorded := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `UPDATE flights SET created_at = $1`, recorded); err != nil {
		t.Fatal(err)
	}
	var ts []tilestore.Tile
	add := func(flight string, n int, size int64) {
		for i := range n {
			id := fmt.Sprintf("%s-3-%d-0", flight, i)
			ts = append(ts, tilestore.Tile{ID: id, FlightID: flight, Z: 3, X: int64(i), Y: 0, ContentType: "image/png",
				SizeBytes: size, SHA256: strings.Repeat("b", 64), BlobPath: flight + "/3/" + fmt.Sprint(i) + "/0.png",
				CapturedAt: recorded})
		}
	}
	add("A", 4, 100)
	add("B", 3, 1000)
	if _, err := s.InsertTiles(ctx, ts); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE tiles SET voting_status = 'uploaded', uploaded_at = now() WHERE tile_id IN ('A-3-0-0', 'A-3-1-0')`,
		`UPDATE tiles SET voting_status = 'upload_giveup', gave_up_at = now() WHERE tile_id = 'A-3-2-0'`,
		`UPDATE tiles SET voting_status = 'trusted' WHERE tile_id IN ('B-3-0-0', 'B-3-1-0')`,
		`UPDATE tiles SET voting_status = 'rejected' WHERE tile_id = 'B-3-2-0'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	run := func(id, flight string, started time.Time, outcome string, code int) {
		t.Helper()
		if err := s.StartRun(ctx, tilestore.UploadRun{RunID: id, FlightID: flight, Host: "gs-1", PID: 42, StartedAt: started}); err != nil {
			t.Fatal(err)
		}
		if outcome == "" {
			return
		}
		end := started.Add(time.Minute)
		if err := s.FinishRun(ctx, tilestore.UploadRun{RunID: id, FlightID: flight, FinishedAt: &end, Outcome: &outcome, ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
	}
	run("run-1", "A", recorded.Add(time.Hour), "failed", 1)
	run("run-2", "A", recorded.Add(2*time.Hour), "success", 0)
	run("run-3", "B", recorded.Add(3*time.Hour), "", 0)
	return s, recorded
}

func list(t *testing.T, s *tilestore.Store, now time.Time, output string) string {
	t.Helper()
	ios, _, out, _ := iostreams.Test()
	err := ListRun(context.Background(), &ListOptions{IO: ios, Output: output, Now: func() time.Time { return now },
		Store: func(context.Context) (ListStore, error) { return s, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestListJSONGivesEachFlightsStateCountsCacheBytesLastRunAndAge(t *testing.T) {
	t.Parallel()
	s, recorded := listFixture(t)
	now := recorded.Add(50 * time.Hour)
	out := list(t, s, now, "json")

	var raw map[string][]map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil || len(raw) != 1 {
		t.Fatalf("not one {\"flights\": [...]} object: %v\n%s", err, out)
	}
	fl := raw["flights"]
	if len(fl) != 3 {
		t.Fatalf("%d flights, want 3:\n%s", len(fl), out)
	}
	wantKeys := []string{"age_seconds", "cache_bytes", "counts", "flight_id", "last_run", "recorded_at", "state", "total"}
	for _, f := range fl {
		if got := keys(f); !reflect.DeepEqual(got, wantKeys) {
			t.Fatalf("flight keys %v, want %v", got, wantKeys)
		}
	}
	counts := func(p, tr, rj, up, gu float64) map[string]any {
		return map[string]any{"pending": p, "trusted": tr, "rejected": rj, "uploaded": up, "upload_giveup": gu}
	}
	for i, want := range []struct {
		id, state     string
		counts        map[string]any
		total, bytes  float64
		run, outcome  any
		finished      any
		runStartedAt  string
		runFinishedAt any
	}{
		{"A", "on_ground", counts(1, 0, 0, 2, 1), 4, 400, "run-2", "success", true, "2026-11-20T10:00:00Z", "2026-11-20T10:01:00Z"},
		{"B", "airborne", counts(0, 2, 1, 0, 0), 3, 3000, "run-3", nil, false, "2026-11-20T11:00:00Z", nil},
		{"C", "on_ground", counts(0, 0, 0, 0, 0), 0, 0, nil, nil, nil, "", nil},
	} {
		f := fl[i]
		if f["flight_id"] != want.id || f["state"] != want.state || !reflect.DeepEqual(f["counts"], want.counts) ||
			f["total"] != want.total || f["cache_bytes"] != want.bytes {
			t.Errorf("flight %d = %v, want %s %s %v total %v bytes %v", i, f, want.id, want.state, want.counts, want.total, want.bytes)
		}
		if f["recorded_at"] != "2026-11-20T08:00:00Z" || f["age_seconds"] != float64(50*3600) {
			t.Errorf("flight %s recorded_at %v age_seconds %v, want 2026-11-20T08:00:00Z and %d", want.id, f["recorded_at"], f["age_seconds"], 50*3600)
		}
		if want.run == nil {
			if f["last_run"] != nil {
				t.Errorf("flight %s never ran, last_run = %v, want null", want.id, f["last_run"])
			}
			continue
		}
		lr, _ := f["last_run"].(map[string]any)
		if lr["run_id"] != want.run || lr["outcome"] != want.outcome || lr["finished"] != want.finished ||
			lr["started_at"] != want.runStartedAt || lr["finished_at"] != want.runFinishedAt || lr["host"] != "gs-1" || lr["pid"] != 42.0 {
			t.Errorf("flight %s last_run = %v, want run %v outcome %v finished %v", want.id, lr, want.run, want.outcome, want.finished)
		}
	}
}

func TestListTextHasOneAlignedRowPerFlightWithNeverForAFlightThatNeverRan(t *testing.T) {
	t.Parallel()
	s, recorded := listFixture(t)
	out := list(t, s, recorded.Add(50*time.Hour), "text")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "FLIGHT") {
		t.Fatalf("want a header and 3 rows:\n%s", out)
	}
	for i, want := range [][]string{
		{"A", "on_ground", "400 B", "2026-11-20T10:00:00Z success", "2d"},
		{"B", "airborne", "2.9 KiB", "2026-11-20T11:00:00Z unfinished", "2d"},
		{"C", "on_ground", "0 B", "never", "2d"},
	} {
		row := lines[i+1]
		if !strings.HasPrefix(row, want[0]+" ") {
			t.Errorf("row %d is not flight %s: %q", i+1, want[0], row)
		}
		for _, w := range want[1:] {
			if !strings.Contains(row, w) {
				t.Errorf("row of %s lacks %q: %q", want[0], w, row)
			}
		}
	}
	for _, col := range []string{"PENDING", "GIVEN UP", "CACHE", "LAST RUN", "AGE"} {
		at := strings.Index(lines[0], col)
		for _, row := range lines[1:] {
			if at < 0 || at >= len(row) || row[at] == ' ' || row[at-1] != ' ' {
				t.Errorf("column %s does not start at %d in %q:\n%s", col, at, row, out)
			}
		}
	}
}

func TestListWithoutFlightsSaysHowToRecordOneAndJSONIsAnEmptyArray(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	s := tilestore.NewStore(pool)
	if out := list(t, s, time.Now(), "text"); !strings.Contains(out, "tiles import") {
		t.Errorf("text without flights: %q", out)
	}
	if out := list(t, s, time.Now(), "json"); strings.TrimSpace(out) != "{\n  \"flights\": []\n}" {
		t.Errorf("json without flights: %q", out)
	}
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
