package status

import (
	"context"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
)

// seed records flight f1 with 3 tiles (one given up) and an empty flight f2.
func seed(t *testing.T, pool *pgxpool.Pool) *tilestore.Store {
	t.Helper()
	ctx := context.Background()
	s := tilestore.NewStore(pool)
	for _, f := range []string{"f1", "f2"} {
		if _, err := s.UpsertFlight(ctx, f, tilestore.FlightOnGround); err != nil {
			t.Fatal(err)
		}
	}
	var ts []tilestore.Tile
	for i, id := range []string{"f1-1-0-0", "f1-1-0-1", "f1-1-1-0"} {
		ts = append(ts, tilestore.Tile{ID: id, FlightID: "f1", Z: 1, X: int64(i / 2), Y: int64(i % 2),
			ContentType: "image/png", SizeBytes: 1, SHA256: strings.Repeat("a", 64),
			BlobPath: "f1/" + id + ".png", CapturedAt: time.Unix(1e9, 0)})
	}
	if _, err := s.InsertTiles(ctx, ts); err != nil {
		t.Fatal(err)
	}
	// The decorator's give-up, written directly: this test is about display.
	if _, err := pool.Exec(ctx, `UPDATE tiles SET voting_status = 'upload_giveup', upload_attempts = 5,
		last_rejection_reason = 'checksum_mismatch', last_rejection_message = 'sha differs',
		gave_up_at = '2026-01-02T03:04:05Z' WHERE tile_id = 'f1-1-1-0'`); err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, s *tilestore.Store, flight, output string) (string, error) {
	t.Helper()
	ios, _, out, _ := iostreams.Test()
	err := Run(context.Background(), &Options{IO: ios, FlightID: flight, Output: output, Limit: 100,
		Store: func(context.Context) (Store, error) { return s, nil }})
	return out.String(), err
}

func TestJSONShapeIsStable(t *testing.T) {
	pool, _ := pgtest.New(t)
	s := seed(t, pool)
	out, err := run(t, s, "", "json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got := keys(raw); !reflect.DeepEqual(got, []string{"flights", "give_ups", "give_ups_total", "open_batches"}) {
		t.Fatalf("top-level keys %v", got)
	}
	flights := raw["flights"].([]any)
	f1 := flights[0].(map[string]any)
	if got := keys(f1); !reflect.DeepEqual(got, []string{"counts", "flight_id", "runs", "runs_total", "state", "total"}) {
		t.Fatalf("flight keys %v", got)
	}
	wantCounts := map[string]any{"pending": 2.0, "trusted": 0.0, "rejected": 0.0, "uploaded": 0.0, "upload_giveup": 1.0}
	if !reflect.DeepEqual(f1["counts"], wantCounts) || f1["total"] != 3.0 || f1["flight_id"] != "f1" || f1["state"] != "on_ground" {
		t.Fatalf("flight f1 = %v", f1)
	}
	if f2 := flights[1].(map[string]any); f2["total"] != 0.0 || len(f2["counts"].(map[string]any)) != 5 {
		t.Fatalf("empty flight f2 = %v (every status must be present)", f2)
	}
	if raw["give_ups_total"] != 1.0 {
		t.Fatalf("give_ups_total = %v, want 1", raw["give_ups_total"])
	}
	gu := raw["give_ups"].([]any)[0].(map[string]any)
	want := map[string]any{"tile_id": "f1-1-1-0", "flight_id": "f1", "attempts": 5.0, "last_reason": "checksum_mismatch",
		"last_message": "sha differs", "gave_up_at": "2026-01-02T03:04:05Z"}
	if !reflect.DeepEqual(gu, want) {
		t.Fatalf("give-up = %v, want %v", gu, want)
	}
}

func TestEmptyListsAreArraysNotNull(t *testing.T) {
	pool, _ := pgtest.New(t)
	out, err := run(t, tilestore.NewStore(pool), "", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"flights": []`) || !strings.Contains(out, `"give_ups": []`) {
		t.Fatalf("empty status JSON: %s", out)
	}
}

func TestTableIsAlignedAndListsGiveUps(t *testing.T) {
	pool, _ := pgtest.New(t)
	out, err := run(t, seed(t, pool), "f1", "table")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "FLIGHT") || !strings.HasPrefix(lines[1], "f1") {
		t.Fatalf("table:\n%s", out)
	}
	// Aligned: each column starts at the same offset in header and row.
	if strings.Index(lines[0], "PENDING") != strings.Index(lines[1], "2") {
		t.Errorf("PENDING column not aligned:\n%s", out)
	}
	if strings.Contains(out, "f2") {
		t.Errorf("--flight f1 shows f2:\n%s", out)
	}
	if !strings.Contains(out, "f1-1-1-0") || !strings.Contains(out, "checksum_mismatch") || !strings.Contains(out, "2026-01-02T03:04:05Z") {
		t.Errorf("give-up missing:\n%s", out)
	}
}

func TestUnknownFlightIsAnError(t *testing.T) {
	pool, _ := pgtest.New(t)
	_, err := run(t, tilestore.NewStore(pool), "nope", "json")
	if err == nil || !strings.Contains(err.Error(), "flight not found") {
		t.Fatalf("err = %v", err)
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

func TestStatusShowsWhichRunsHoldOpenBatchesAndWhenTheirLeasesEnd(t *testing.T) {
	pool, _ := pgtest.New(t)
	base := seed(t, pool)
	ctx := context.Background()
	claim := func(s *tilestore.Store, op string) {
		t.Helper()
		_, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "f1", Limit: 1, OpID: op,
			Pick: func(c []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
				return tilestore.Batch{OpID: op, Fingerprint: "fp", TileIDs: []string{c[0].ID}, SHA256s: []string{c[0].SHA256}}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
	}
	claim(base.ForRun(tilestore.Run{ID: "run-a", Host: "station-a", PID: 101, Lease: time.Hour}), "op-a")
	claim(base.ForRun(tilestore.Run{ID: "run-b", Host: "station-b", PID: 202, Lease: time.Millisecond}), "op-b")
	time.Sleep(5 * time.Millisecond) // run-b's lease runs out
	out, err := run(t, base, "f1", "json")
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.OpenBatches) != 2 {
		t.Fatalf("open_batches %+v, want two runs", r.OpenBatches)
	}
	b, a := r.OpenBatches[0], r.OpenBatches[1] // soonest lease end first
	if a.Host != "station-a" || a.PID != 101 || a.RunID != "run-a" || a.Tiles != 1 || a.Expired ||
		a.LeaseExpiresAt == nil || time.Until(*a.LeaseExpiresAt) < 50*time.Minute {
		t.Errorf("live run: %+v", a)
	}
	if b.Host != "station-b" || b.PID != 202 || !b.Expired {
		t.Errorf("expired run: %+v", b)
	}
	table, err := run(t, base, "f1", "table")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"station-a", "101", "run-a", a.LeaseExpiresAt.Format(time.RFC3339), "expired: the next run settles them"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestGiveUpListSaysHowManyItShowsOfHowMany(t *testing.T) {
	pool, _ := pgtest.New(t)
	s := seed(t, pool)
	if _, err := pool.Exec(context.Background(), `UPDATE tiles SET voting_status = 'upload_giveup', upload_attempts = 5,
		gave_up_at = now() WHERE tile_id = 'f1-1-0-0'`); err != nil {
		t.Fatal(err)
	}
	ios, _, out, _ := iostreams.Test()
	err := Run(context.Background(), &Options{IO: ios, FlightID: "f1", Output: "text", Limit: 1,
		Store: func(context.Context) (Store, error) { return s, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Given up (showing 1 of 2, newest first") {
		t.Fatalf("text:\n%s", out.String())
	}
	for n, want := range map[int64]string{3002: "3,002", 100: "100", 1234567: "1,234,567", 0: "0"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
