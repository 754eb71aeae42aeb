package opsafety

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider/providertest"
)

// damage names what happens to one tile's cached blob.
type damage func(t *testing.T, path string)

func deleteBlob(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// corruptBlob keeps the size and changes the bytes.
func corruptBlob(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOneDeletedBlobIsNamedKeepsItsBudgetAndIsMendedByImportingAgain(t *testing.T) {
	t.Parallel()
	badBlobStory(t, deleteBlob, "blob_missing")
}

func TestOneCorruptBlobIsNamedKeepsItsBudgetAndIsMendedByImportingAgain(t *testing.T) {
	t.Parallel()
	badBlobStory(t, corruptBlob, "blob_wrong_sha256")
}

// badBlobStory: one of six tiles' blobs is damaged. The other five upload
// in the same run; the damaged one keeps 0 attempts and is named; verify
// flags it; importing the original directory again restores it; verify
// then passes and the next run finishes the flight.
func badBlobStory(t *testing.T, hurt damage, problem string) {
	t.Helper()
	s := newStation(t, providertest.Start(t, nil))
	original := s.importFlight("F2", 6)
	bad := tileID("F2", 3)
	hurt(t, s.blobPath("F2", 3))

	r, sum := s.uploadJSON("--flight", "F2")
	if r.Exit != 3 {
		t.Fatalf("upload: exit %d, want 3\nstderr: %s", r.Exit, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "tilectl tiles verify --flight F2") || !strings.Contains(r.Stderr, "tiles import --flight F2") {
		t.Errorf("stderr does not point to tiles verify and a re-import:\n%s", r.Stderr)
	}
	lfs, _ := sum["local_failures"].([]any)
	if len(lfs) != 1 || lfs[0].(map[string]any)["tile_id"] != bad || lfs[0].(map[string]any)["problem"] != problem ||
		lfs[0].(map[string]any)["cache_path"] != s.blobPath("F2", 3) {
		t.Fatalf("local_failures %v, want %s (%s) at %s", sum["local_failures"], bad, problem, s.blobPath("F2", 3))
	}
	held := s.heldByProvider()
	if len(held) != 5 || held[bad] {
		t.Fatalf("the provider holds %v; want the 5 sound tiles only", held)
	}
	if tl := s.tiles("F2")[bad]; tl.Status != "pending" || tl.Attempts != 0 {
		t.Fatalf("tile %s: %s with %d attempts, want pending with 0", bad, tl.Status, tl.Attempts)
	}

	v := s.Run("tiles", "verify", "--flight", "F2", "-o", "json")
	var vs struct {
		Checked  int `json:"checked"`
		Problems []struct {
			TileID  string `json:"tile_id"`
			Problem string `json:"problem"`
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(v.Stdout), &vs); err != nil || v.Exit != 1 || vs.Checked != 1 ||
		len(vs.Problems) != 1 || vs.Problems[0].TileID != bad || vs.Problems[0].Problem != problem {
		t.Fatalf("verify: exit %d, %+v (%v); want exit 1 flagging %s\nstdout: %s", v.Exit, vs, err, bad, v.Stdout)
	}

	imp := s.MustRun("tiles", "import", "--flight", "F2", "-o", "json", original)
	var is struct {
		Repaired int `json:"repaired"`
		Imported int `json:"imported"`
	}
	if err := json.Unmarshal([]byte(imp.Stdout), &is); err != nil || is.Repaired != 1 || is.Imported != 0 {
		t.Fatalf("re-import: %+v (%v), want 1 repaired, 0 imported\nstdout: %s", is, err, imp.Stdout)
	}
	s.MustRun("tiles", "verify", "--flight", "F2")
	s.MustRun("upload-pending", "--flight", "F2")
	if held := s.heldByProvider(); len(held) != 6 {
		t.Fatalf("the provider holds %d tiles, want all 6", len(held))
	}
	for id, tl := range s.tiles("F2") {
		if tl.Status != "uploaded" || tl.Attempts != 0 {
			t.Errorf("tile %s: %s with %d attempts, want uploaded with 0", id, tl.Status, tl.Attempts)
		}
	}
}

func TestReimportingADifferentFileForARecordedTileIsRefusedWithBothHashes(t *testing.T) {
	t.Parallel()
	s := newStation(t, providertest.Start(t, nil))
	original := s.importFlight("F3", 3)
	corruptBlob(t, s.blobPath("F3", 1))
	other := t.TempDir()
	testbin.WriteTile(t, other, 1, 99) // tile 10/1/7 with other pixels
	r := s.Run("tiles", "import", "--flight", "F3", "-o", "json", other)
	var is struct {
		Mismatched []struct {
			TileID         string `json:"tile_id"`
			RecordedSHA256 string `json:"recorded_sha256"`
			FileSHA256     string `json:"file_sha256"`
		} `json:"mismatched"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &is); err != nil || r.Exit != 1 || len(is.Mismatched) != 1 {
		t.Fatalf("import of another file: exit %d, %+v (%v); want exit 1 with one mismatch\nstderr: %s", r.Exit, is, err, r.Stderr)
	}
	m := is.Mismatched[0]
	if m.TileID != tileID("F3", 1) || m.RecordedSHA256 == m.FileSHA256 ||
		!strings.Contains(r.Stderr, m.RecordedSHA256) || !strings.Contains(r.Stderr, m.FileSHA256) {
		t.Errorf("mismatch %+v; stderr must name both hashes:\n%s", m, r.Stderr)
	}
	// The record is untouched: the original still repairs the blob.
	if v := s.Run("tiles", "verify", "--flight", "F3"); v.Exit != 1 {
		t.Fatalf("verify after the refused import: exit %d, want 1 (the blob is still bad)", v.Exit)
	}
	s.MustRun("tiles", "import", "--flight", "F3", original)
	s.MustRun("tiles", "verify", "--flight", "F3")
}
