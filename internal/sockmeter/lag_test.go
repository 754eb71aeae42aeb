package sockmeter

import (
	"testing"
	"time"
)

// The answer lag is the typical one of the latest batches, not their
// longest: a batch whose last byte waited behind the others' in the
// bottleneck's queue answers late, and the run's last batch, with no
// others beside it, does not. Answers 400 ms, 700 ms, 900 ms and 1.5 s
// after their bodies make it 800 ms, their median (neither the shortest
// nor the longest); small requests do not count once a batch's lag is
// known; and only the latest lagAnswers count (not the 5 s before them).
func TestTheAnswerLagIsTheMedianOfTheLatestBatches(t *testing.T) {
	m := New(nil, nil)
	for _, d := range []time.Duration{5000, 400, 700, 900, 1500} {
		m.observeLag(time.Time{}, d*time.Millisecond, minLagRequest, -1)
	}
	m.observeLag(time.Time{}, 10*time.Millisecond, 100, -1)
	if lag, ok := m.AnswerLag(); !ok || lag != 800*time.Millisecond {
		t.Fatalf("answer lag %s (known %v), want 800ms", lag, ok)
	}
}

// Answers is the latest keptAnswers answers, oldest first, however many
// came: the older ones are dropped.
func TestAnswersAreTheLatestKeptAnswers(t *testing.T) {
	m := New(nil, time.Now)
	start := time.Unix(1_700_000_000, 0)
	const n = 3*keptAnswers + 7
	for i := range n {
		m.observeLag(start.Add(time.Duration(i)*time.Millisecond), time.Millisecond, minLagRequest, int64(i))
	}
	got := m.Answers()
	if len(got) != keptAnswers || got[0].Acked != n-keptAnswers || got[len(got)-1].Acked != n-1 {
		t.Fatalf("%d answers from %d to %d, want the latest %d: %d to %d",
			len(got), got[0].Acked, got[len(got)-1].Acked, keptAnswers, n-keptAnswers, n-1)
	}
}
