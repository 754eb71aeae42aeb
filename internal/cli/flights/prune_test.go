package flights

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider"
)

// blob is the cache path of tile 10/i/7 of flight f, as tiles import names it.
func (s *station) blob(f string, i int) string {
	return filepath.Join(s.Cache, f, "10", strconv.Itoa(i), "7.png")
}

// count runs one statement on the station's database and returns its
// single int64.
func (s *station) count(sql string, args ...any) int64 {
	s.T.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.DB)
	if err != nil {
		s.T.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		s.T.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (s *station) prune(args ...string) PruneReport {
	s.T.Helper()
	out := s.MustRun(append([]string{"flights", "prune", "-o", "json"}, args...)...)
	var r PruneReport
	if err := json.Unmarshal([]byte(out.Stdout), &r); err != nil {
		s.T.Fatalf("flights prune -o json: %v\n%s", err, out.Stdout)
	}
	return r
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestPruneFreesOnlyUploadedBlobsKeepsEveryStatusAndDropsTheFinishedFlightsJournal(t *testing.T) {
	t.Parallel()
	// The provider always rejects tile 3 of F1: with a budget of one
	// attempt it is given up, and its blob must stay.
	s := newStationWith(t, func(c *provider.Config) { c.Faults.RejectTileIDs = []string{"F1-10-3-7"} })
	s.Env = append(s.Env, "TILECTL_RETRY_MAX_PER_TILE_ATTEMPTS=1", "TILECTL_UPLOAD_BATCH_SIZE=2")
	d1, d2 := t.TempDir(), t.TempDir()
	for i := range 6 {
		testbin.WriteTile(t, d1, i, 1)
	}
	for i := range 3 {
		testbin.WriteTile(t, d2, i, 2)
	}
	s.MustRun("tiles", "import", "--flight", "F1", d1)
	s.MustRun("tiles", "import", "--flight", "F2", d2) // on_ground, never uploaded: pending
	if r := s.Run("upload-pending", "--flight", "F1"); r.Exit != 3 {
		t.Fatalf("upload-pending: exit %d, want 3 (one give-up)\n%s", r.Exit, r.Stderr)
	}
	batches := s.count(`SELECT count(*) FROM upload_batches WHERE flight_id = 'F1'`)
	rejections := s.count(`SELECT count(*) FROM upload_rejections`)
	if batches < 3 || rejections != 1 {
		t.Fatalf("after the upload: %d batches, %d rejections; want at least 3 and 1", batches, rejections)
	}

	dry := s.prune("--dry-run")
	if !dry.DryRun || dry.Disk.Tiles != 5 || dry.Disk.Files != 5 || dry.Disk.Bytes <= 0 ||
		dry.Database.Batches != batches || len(dry.Database.Flights) != 1 {
		t.Fatalf("dry run: %+v; want 5 tiles, 5 files, %d batches of F1", dry, batches)
	}
	if !exists(s.blob("F1", 0)) || s.count(`SELECT count(*) FROM upload_batches`) != batches ||
		s.count(`SELECT count(*) FROM tiles WHERE blob_pruned_at IS NOT NULL`) != 0 {
		t.Fatal("the dry run changed something")
	}

	r := s.prune()
	if r.DryRun || r.Disk.Tiles != 5 || r.Disk.Files != 5 || r.Disk.Bytes != dry.Disk.Bytes ||
		r.Database.Batches != batches || r.Database.Rejections != 0 || r.Database.RowBytes <= 0 ||
		strings.Join(r.Database.Flights, ",") != "F1" || r.Error != nil {
		t.Fatalf("prune: %+v", r)
	}
	for i := range 6 {
		if got, want := exists(s.blob("F1", i)), i == 3; got != want {
			t.Errorf("F1 tile %d: blob exists %v, want %v (only the given-up tile keeps it)", i, got, want)
		}
	}
	for i := range 3 {
		if !exists(s.blob("F2", i)) {
			t.Errorf("F2 tile %d (pending): blob gone", i)
		}
	}
	// Statuses, give-up, its rejection and the run history stay.
	f := s.flight("F1")
	if f.Counts["uploaded"] != 5 || f.Counts["upload_giveup"] != 1 || f.LastRun == nil || f.CacheBytes != s.count(`SELECT size_bytes FROM tiles WHERE tile_id = 'F1-10-3-7'`) {
		t.Fatalf("F1 after prune: %+v", f)
	}
	if n := s.count(`SELECT count(*) FROM upload_rejections WHERE tile_id = 'F1-10-3-7'`); n != 1 {
		t.Fatalf("the given-up tile's rejection: %d rows, want 1", n)
	}
	if n := s.count(`SELECT count(*) FROM upload_runs WHERE flight_id = 'F1'`); n != 1 {
		t.Fatalf("run history: %d rows, want 1", n)
	}
	if st := s.MustRun("status", "--flight", "F1"); !strings.Contains(st.Stdout, "F1-10-3-7") {
		t.Fatalf("status no longer lists the give-up:\n%s", st.Stdout)
	}
	// Again: nothing left to free.
	if again := s.prune(); again.Disk.Tiles != 0 || again.Disk.Files != 0 || again.Database.Batches != 0 {
		t.Fatalf("second prune: %+v", again)
	}

	// verify says the pruned tiles' bytes are gone; requeue refuses one, saying so.
	v := s.MustRun("tiles", "verify", "--flight", "F1")
	if !strings.Contains(v.Stdout, "5 uploaded tiles are not checked: their cached blobs were pruned") {
		t.Fatalf("verify:\n%s", v.Stdout)
	}
	q := s.Run("tiles", "requeue", "--flight", "F1", "--tile", "F1-10-0-7", "--reason", "test")
	if q.Exit != 1 || !strings.Contains(q.Stderr, "its cached blob pruned at") ||
		!strings.Contains(q.Stderr, "bytes are gone from this station") {
		t.Fatalf("requeue of a pruned tile: exit %d\n%s", q.Exit, q.Stderr)
	}
	if f := s.flight("F1"); f.Counts["uploaded"] != 5 || f.Counts["upload_giveup"] != 1 {
		t.Fatalf("after the refused requeue: %+v", f)
	}
	// The given-up tile is still sendable: requeued and uploaded once the provider takes it.
	s.MustRun("tiles", "requeue", "--flight", "F1", "--tile", "F1-10-3-7", "--reason", "test", "--yes")
	if lf := s.MustRun("tiles", "verify", "--flight", "F1"); !strings.Contains(lf.Stdout, "1 sound, 0 bad") {
		t.Fatalf("verify after requeue:\n%s", lf.Stdout)
	}
}

func TestPruneUploadedBeforeKeepsTheBlobsOfRecentUploads(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	dir := t.TempDir()
	for i := range 4 {
		testbin.WriteTile(t, dir, i, 3)
	}
	s.MustRun("tiles", "import", "--flight", "F1", dir)
	s.MustRun("upload-pending", "--flight", "F1")
	if r := s.prune("--flight", "F1", "--uploaded-before", "1d"); r.Disk.Tiles != 0 || r.Disk.Files != 0 || r.UploadedBefore == nil {
		t.Fatalf("--uploaded-before 1d right after the upload: %+v", r)
	}
	if !exists(s.blob("F1", 0)) {
		t.Fatal("a blob uploaded a moment ago was pruned by --uploaded-before 1d")
	}
	// Made a week old: pruned.
	s.count(`WITH u AS (UPDATE tiles SET uploaded_at = now() - interval '8 days' WHERE tile_id IN ('F1-10-0-7', 'F1-10-1-7') RETURNING 1)
		SELECT count(*) FROM u`)
	if r := s.prune("--flight", "F1", "--uploaded-before", "7d"); r.Disk.Tiles != 2 || r.Disk.Files != 2 {
		t.Fatalf("--uploaded-before 7d: %+v, want the 2 tiles uploaded 8 days ago", r)
	}
	if exists(s.blob("F1", 0)) || !exists(s.blob("F1", 2)) {
		t.Fatal("--uploaded-before 7d pruned the wrong blobs")
	}
	if r := s.Run("flights", "prune", "--uploaded-before", "a week"); r.Exit != 2 || !strings.Contains(r.Stderr, "--uploaded-before") {
		t.Fatalf("a bad age: exit %d\n%s", r.Exit, r.Stderr)
	}
	r := s.Run("flights", "prune", "--flight", "F9", "-o", "json")
	var rep PruneReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); r.Exit != 2 || err != nil || rep.Error == nil ||
		!strings.Contains(*rep.Error, "flight F9 is not recorded") {
		t.Fatalf("prune of an unknown flight: exit %d, stdout %q\n%s", r.Exit, r.Stdout, r.Stderr)
	}
}

func TestCacheRetentionPrunesAtTheEndOfASuccessfulRunOnly(t *testing.T) {
	t.Parallel()
	s := newStationWith(t, func(c *provider.Config) { c.Faults.RejectTileIDs = []string{"F3-10-0-7"} })
	dir := t.TempDir()
	for i := range 4 {
		testbin.WriteTile(t, dir, i, 4)
	}
	s.MustRun("tiles", "import", "--flight", "F1", dir)
	s.MustRun("tiles", "import", "--flight", "F2", "--state", "airborne", dir)
	s.MustRun("tiles", "import", "--flight", "F3", dir)
	s.Env = append(s.Env, "TILECTL_CACHE_RETENTION=1ms", "TILECTL_RETRY_MAX_PER_TILE_ATTEMPTS=1")
	// A run that gives a tile up is partial (exit 3): it prunes nothing.
	if r := s.Run("upload-pending", "--flight", "F3"); r.Exit != 3 || strings.Contains(r.Stderr, "cache retention") {
		t.Fatalf("a partial run with cache.retention: exit %d\n%s", r.Exit, r.Stderr)
	}
	for i := range 4 {
		if !exists(s.blob("F3", i)) {
			t.Errorf("F3 tile %d: blob pruned by a partial run", i)
		}
	}
	r := s.MustRun("upload-pending", "--flight", "F1")
	if !strings.Contains(r.Stderr, "cache retention: pruned") {
		t.Fatalf("upload-pending with cache.retention logged no prune:\n%s", r.Stderr)
	}
	for i := range 4 {
		if exists(s.blob("F1", i)) {
			t.Errorf("F1 tile %d: blob kept after a successful run with cache.retention", i)
		}
		if !exists(s.blob("F2", i)) {
			t.Errorf("F2 tile %d (airborne, pending): blob gone", i)
		}
	}
	if n := s.count(`SELECT count(*) FROM upload_batches WHERE flight_id = 'F1'`); n != 0 {
		t.Fatalf("F1's settled batches: %d left, want 0", n)
	}
	// The successful run's retention prunes every flight's old uploads:
	// F3's uploaded tiles too, never its given-up one.
	for i := range 4 {
		if got, want := exists(s.blob("F3", i)), i == 0; got != want {
			t.Errorf("F3 tile %d: blob exists %v, want %v", i, got, want)
		}
	}
}

// TestPruneBesideARunningUploadAndImportTakesNoBlobTheyNeed prunes again
// and again while upload-pending sends one flight (slowly: every batch
// waits 150 ms at the provider) and tiles import records another: the
// upload sends every tile with no blob missing, the import's tiles all
// keep sound blobs, and each prune takes only tiles already uploaded.
func TestPruneBesideARunningUploadAndImportTakesNoBlobTheyNeed(t *testing.T) {
	t.Parallel()
	s := newStationWith(t, func(c *provider.Config) { c.Faults.Latency = 150 * time.Millisecond })
	s.Env = append(s.Env, "TILECTL_UPLOAD_BATCH_SIZE=4", "TILECTL_UPLOAD_CONCURRENCY=2")
	d1, d2 := t.TempDir(), t.TempDir()
	for i := range 60 {
		testbin.WriteTile(t, d1, i, 9)
		testbin.WriteTile(t, d2, i, 10)
	}
	s.MustRun("tiles", "import", "--flight", "F1", d1)

	start := func(args ...string) (*exec.Cmd, *bytes.Buffer) {
		var out bytes.Buffer
		cmd := exec.Command(s.Bin, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = s.Env, &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	up, upOut := start("upload-pending", "--flight", "F1")
	im, imOut := start("tiles", "import", "--flight", "F2", d2)
	done := make(chan error, 2)
	go func() { done <- up.Wait() }()
	go func() { done <- im.Wait() }()
	prunes, pruned := 0, int64(0)
	for ended := 0; ended < 2; {
		select {
		case <-done:
			ended++
			continue
		default:
		}
		r := s.prune()
		prunes++
		pruned += r.Disk.Tiles
		if got := s.count(`SELECT count(*) FROM tiles WHERE blob_pruned_at IS NOT NULL AND voting_status <> 'uploaded'`); got != 0 {
			t.Fatalf("prune %d marked %d tiles pruned that are not uploaded", prunes, got)
		}
	}
	if up.ProcessState.ExitCode() != 0 || strings.Contains(upOut.String(), "blob") {
		t.Fatalf("upload-pending beside prunes: exit %d\n%s", up.ProcessState.ExitCode(), upOut)
	}
	if im.ProcessState.ExitCode() != 0 {
		t.Fatalf("tiles import beside prunes: exit %d\n%s", im.ProcessState.ExitCode(), imOut)
	}
	if prunes < 3 || pruned == 0 {
		t.Fatalf("%d prunes freed %d tiles while the upload ran: the test did not overlap them", prunes, pruned)
	}
	rest := s.prune()
	if pruned+rest.Disk.Tiles != 60 {
		t.Fatalf("pruned %d during the upload and %d after, want 60 in all", pruned, rest.Disk.Tiles)
	}
	if f := s.flight("F1"); f.Counts["uploaded"] != 60 {
		t.Fatalf("F1: %+v", f)
	}
	if v := s.Run("tiles", "verify", "--flight", "F2"); v.Exit != 0 || !strings.Contains(v.Stdout, "60 sound, 0 bad") {
		t.Fatalf("verify F2: exit %d\n%s%s", v.Exit, v.Stdout, v.Stderr)
	}
}
