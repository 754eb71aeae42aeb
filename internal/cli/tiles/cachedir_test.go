package tiles

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
)

// An import that cannot write the blob cache fails before it records the
// flight, and says which directory it is and where that was configured.
// (The tests run as root, whom file modes do not stop: the cache here is
// a directory nobody can write in, or one where the flight's directory is
// a file.)
func TestImportIntoACacheItCannotWriteLeavesNoFlightAndNamesTheDirAndItsSource(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache func(t *testing.T) string
	}{
		{"a directory nobody can write in", func(*testing.T) string { return "/proc/self/fdinfo" }},
		{"a file where the flight's directory goes", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "flt-ro"), []byte("in the way"), 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := tc.cache(t)
			ios, _, _, _ := iostreams.Test()
			vars := map[string]string{"TILECTL_DATABASE_URL": pgtest.NewURL(t), "TILECTL_CACHE_DIR": cache}
			f := factory.NewWith(ios, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, "test", "")
			t.Cleanup(f.Close)
			err := ImportRun(context.Background(), &ImportOptions{
				IO: ios, Config: f.Config, Store: f.Store,
				Dir: tilesDir, FlightID: "flt-ro", State: tilestore.FlightOnGround, BatchSize: 10, Output: "text",
			})
			if err == nil {
				t.Fatal("the import succeeded")
			}
			for _, want := range []string{cache, "env TILECTL_CACHE_DIR"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			store, serr := f.Store(context.Background())
			if serr != nil {
				t.Fatal(serr)
			}
			if _, ferr := store.Flight(context.Background(), "flt-ro"); !errors.Is(ferr, tilestore.ErrFlightNotFound) {
				t.Errorf("the failed import left flight flt-ro behind (err %v)", ferr)
			}
		})
	}
}
