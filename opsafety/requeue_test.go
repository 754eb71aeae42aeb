package opsafety

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

func TestAGivenUpTileIsRequeuedWithAFreshBudgetARecordAndUploadsOnceAccepted(t *testing.T) {
	t.Parallel()
	poison := tileID("F4", 2)
	var cfg provider.Config
	prov := providertest.Start(t, func(c *provider.Config) {
		c.Faults.RejectTileIDs = []string{poison}
		cfg = *c
	})
	s := newStation(t, prov)
	s.importFlight("F4", 4)
	fast := []string{"--flight", "F4", "--max-per-tile-attempts", "2", "--backoff-base", "1ms", "--backoff-cap", "2ms"}

	r := s.Run(append([]string{"upload-pending"}, fast...)...)
	if r.Exit != 3 {
		t.Fatalf("upload: exit %d, want 3 (one tile given up)\nstderr: %s", r.Exit, r.Stderr)
	}
	if tl := s.tiles("F4")[poison]; tl.Status != "upload_giveup" || tl.Attempts != 2 {
		t.Fatalf("tile %s: %s with %d attempts, want given up at 2", poison, tl.Status, tl.Attempts)
	}

	// A tile that is not given up is refused, and nothing changes.
	before := s.tiles("F4")
	bad := s.Run("tiles", "requeue", "--flight", "F4", "--tile", poison, "--tile", tileID("F4", 1), "--reason", "provider fixed decode")
	if bad.Exit != 1 || !strings.Contains(bad.Stderr, tileID("F4", 1)) {
		t.Fatalf("requeue of an uploaded tile: exit %d, stderr %q; want 1 naming it", bad.Exit, bad.Stderr)
	}
	if after := s.tiles("F4"); after[poison] != before[poison] || after[tileID("F4", 1)] != before[tileID("F4", 1)] {
		t.Fatalf("a refused requeue changed tiles: %v -> %v", before, after)
	}
	if r := s.Run("tiles", "requeue", "--flight", "F4", "--all-given-up", "--reason", "x"); r.Exit != 2 {
		t.Fatalf("--all-given-up without a terminal or --yes: exit %d, want 2\n%s", r.Exit, r.Stderr)
	}

	s.MustRun("tiles", "requeue", "--flight", "F4", "--tile", poison, "--reason", "provider fixed decode")
	if tl := s.tiles("F4")[poison]; tl.Status != "pending" || tl.Attempts != 2 {
		t.Fatalf("requeued tile: %s with %d attempts, want pending keeping its 2 spent attempts", tl.Status, tl.Attempts)
	}
	out := s.MustRun("fdr", "tail", "--kind", "upload.requeue", "-o", "json", "--file", s.FDR)
	var rec struct {
		Payload struct {
			TileID           string `json:"tile_id"`
			FlightID         string `json:"flight_id"`
			Reason           string `json:"reason"`
			PreviousAttempts int    `json:"previous_attempts"`
			User             string `json:"user"`
			Host             string `json:"host"`
		} `json:"payload"`
	}
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil || len(lines) != 1 {
		t.Fatalf("fdr tail: %v, %d line(s)\n%s", err, len(lines), out.Stdout)
	}
	if p := rec.Payload; p.TileID != poison || p.FlightID != "F4" || p.Reason != "provider fixed decode" ||
		p.PreviousAttempts != 2 || p.User == "" || p.Host == "" {
		t.Fatalf("requeue record %+v", p)
	}

	// Still rejected: the fresh budget allows 2 more attempts, not 0.
	r = s.Run(append([]string{"upload-pending", "--max-in-call-retries", "0"}, fast...)...)
	if tl := s.tiles("F4")[poison]; tl.Status != "pending" || tl.Attempts != 3 {
		t.Fatalf("after one more rejection: %s with %d attempts, want pending at 3 (budget counts from the requeue)\n%s", tl.Status, tl.Attempts, r.Stderr)
	}

	// The provider is fixed (same state, no poison list) and accepts it.
	cfg.Faults.RejectTileIDs = nil
	fixed, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(fixed.Handler())
	t.Cleanup(hs.Close)
	s.Env = append(s.Env, "TILECTL_PROVIDER_URL="+hs.URL)
	s.MustRun(append([]string{"upload-pending"}, fast...)...)
	if tl := s.tiles("F4")[poison]; tl.Status != "uploaded" || tl.Attempts != 3 {
		t.Fatalf("after the fix: %s with %d attempts, want uploaded, history kept at 3", tl.Status, tl.Attempts)
	}
}
