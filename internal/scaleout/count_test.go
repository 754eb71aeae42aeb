package scaleout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/retrydecorator"
)

// N processes upload (and so count the rejections of) one flight whose
// every tile the provider rejects: each rejection is counted exactly once,
// no tile is sent after its budget, and each give-up has exactly one
// record in the flight data recorder the processes share.
func TestConcurrentProcessesCountEachRejectionOnceAndRecordEachGiveUpOnce(t *testing.T) {
	t.Parallel()
	const n, procs, budget = 120, 4, 3
	r := newRig(t, "CR", n, 20*time.Millisecond, func(string) bool { return true })
	flags := []string{"--batch-size", "10", "--concurrency", "2", "--lease", "5s",
		"--max-per-tile-attempts", "3", "--max-in-call-retries", "20"}
	var ps []*proc
	for range procs {
		ps = append(ps, r.start(flags...))
	}
	for i, p := range ps {
		if code, sum := p.wait(t); code != 3 {
			t.Fatalf("process %d exited %d, want 3 (tiles given up); summary %v\nstderr:\n%s", i, code, sum, p.errb.String())
		}
	}
	ctx := context.Background()
	var bad int
	if err := r.store.Pool().QueryRow(ctx, `SELECT count(*) FROM tiles t WHERE t.flight_id = $1 AND (
		t.voting_status <> 'upload_giveup' OR t.upload_attempts <> $2 OR
		t.upload_attempts <> (SELECT count(*) FROM upload_rejections r WHERE r.tile_id = t.tile_id AND r.counted_at IS NOT NULL) OR
		EXISTS (SELECT 1 FROM upload_rejections r WHERE r.tile_id = t.tile_id AND r.counted_at IS NULL))`,
		r.flight, budget).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d tiles are not given up with exactly %d attempts, each one a counted rejection", bad, budget)
	}
	carried := r.prov.Carried()
	for _, id := range r.ids {
		if carried[id] != budget {
			t.Errorf("tile %s was sent under %d keys, want %d (its budget)", id, carried[id], budget)
		}
	}
	recs, _, err := fdr.ReadFile(context.Background(), r.fdr)
	if err != nil {
		t.Fatal(err)
	}
	perTile := map[string]int{}
	for _, rec := range recs {
		if rec.Kind == retrydecorator.GiveUpKind {
			perTile[strings.Split(rec.Key, "/")[1]]++ // giveup/<tile>/<generation>
		}
	}
	for _, id := range r.ids {
		if perTile[id] != 1 {
			t.Errorf("tile %s has %d give-up records in the FDR, want 1", id, perTile[id])
		}
	}
	if len(perTile) != n {
		t.Errorf("give-up records for %d tiles in the FDR, want %d", len(perTile), n)
	}
}
