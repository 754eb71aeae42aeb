package sockmeter

import (
	"testing"
	"time"
)

// The answer lag is the typical one of the latest batches, not their
// longest: a batch whose last byte waited behind the others' in the
// bottleneck's queue answers late, and the run's last batch, with no
// others beside it, does not. Three answers 600 ms after their bodies
// and one 1.5 s after make it 600 ms; small requests do not count once a
// batch's lag is known; and only the latest lagAnswers count.
func TestTheAnswerLagIsTheMedianOfTheLatestBatches(t *testing.T) {
	m := New(nil)
	for _, d := range []time.Duration{5000, 600, 1500, 600, 600} {
		m.observeLag(d*time.Millisecond, minLagRequest)
	}
	m.observeLag(10*time.Millisecond, 100)
	if lag, ok := m.AnswerLag(); !ok || lag != 600*time.Millisecond {
		t.Fatalf("answer lag %s (known %v), want 600ms", lag, ok)
	}
}
