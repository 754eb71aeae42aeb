package retrydecorator

import "testing"

// newTestRecorder is the FDR recorder the integration tests use. Until the
// fdr package lands it is the in-memory memRecorder (same Key semantics).
func newTestRecorder(t *testing.T) *testRecorder {
	m := &memRecorder{}
	return &testRecorder{GiveUpRecorder: m, count: func(t *testing.T, kind string) int {
		n := 0
		for _, r := range m.records {
			if r.Kind == kind {
				n++
			}
		}
		return n
	}}
}
