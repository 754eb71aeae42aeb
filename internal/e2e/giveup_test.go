package e2e

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider"
)

// TestEveryGiveUpAfterARequeueHasItsOwnFDRRecord gives a poison tile up,
// requeues it and gives it up again, through the real binary against the
// reference provider that always rejects it: the flight data recorder
// file then holds one give-up record per give-up, each under its own key.
func TestEveryGiveUpAfterARequeueHasItsOwnFDRRecord(t *testing.T) {
	t.Parallel()
	prov := refProvider(t, noFaults, nil)
	s := newSite(t, prov.URL)
	ids := s.flight("poison1", 3)
	poison := ids[1]
	prov.Close()
	prov = refProvider(t, provider.FaultConfig{RejectTileIDs: []string{poison}}, nil)
	s.env = append(s.env, "TILECTL_PROVIDER_URL="+prov.URL)

	upload := []string{"upload-pending", "--flight", "poison1", "--max-per-tile-attempts", "1"}
	for round := 1; round <= 2; round++ {
		if r := s.run(time.Minute, upload...); r.exit != 3 {
			t.Fatalf("upload %d: exit %d, want 3 (the poison tile given up)\nstdout: %s\nstderr: %s", round, r.exit, r.stdout, r.stderr)
		}
		if round == 1 {
			s.mustRun("tiles", "requeue", "--flight", "poison1", "--tile", poison, "--reason", "provider fixed its decoder")
		}
	}

	// The ring file itself, read back by the real binary.
	r := s.mustRun("fdr", "tail", "--kind", "upload.giveup", "-o", "json",
		"--file", filepath.Join(s.dir, "cache", "fdr.ring"))
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Key     string `json:"key"`
			Payload struct {
				TileID string `json:"tile_id"`
			} `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("fdr tail -o json printed %q: %v", line, err)
		}
		if rec.Payload.TileID != poison {
			t.Errorf("give-up record %s names tile %q, want %s", rec.Key, rec.Payload.TileID, poison)
		}
		keys = append(keys, rec.Key)
	}
	want := []string{"giveup/" + poison + "/1", "giveup/" + poison + "/2"}
	if !slices.Equal(keys, want) {
		t.Errorf("give-up records %v, want %v (one per give-up)\nfdr tail: %s", keys, want, r.stdout)
	}
}
