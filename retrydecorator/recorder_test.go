package retrydecorator

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tilectl/tilectl/fdr"
)

var _ GiveUpRecorder = RingRecorder{}

// newTestRecorder is a real fdr.Recorder on a temp file; count reads the
// file back, as a safety officer's tool would.
func newTestRecorder(t *testing.T) *testRecorder {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fdr.ring")
	rec, err := fdr.Open(context.Background(), path, fdr.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	return &testRecorder{GiveUpRecorder: RingRecorder{rec}, count: func(t *testing.T, kind string) int {
		t.Helper()
		recs, _, err := fdr.ReadFile(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range recs {
			if r.Kind == kind {
				n++
			}
		}
		return n
	}}
}
