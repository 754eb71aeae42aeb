package upload

import "github.com/tilectl/tilectl/internal/metricsfile"

// SLI is a run's retry indicators, from its totals. A
// value is null when the run gives no basis for it (no request, no
// answered batch): a report never states a number it does not know.
//
//	retry_rate                 resends / requests (resends are transport
//	                           level: every request that repeated an
//	                           earlier one)
//	timeout_rate               timeouts / requests
//	dedup_replay_rate          replayed / batches: the share of answered
//	                           batches whose answer the provider replayed
//	                           from its idempotency record (the provider
//	                           dropped the duplicate and replayed)
//	batch_latency_p50_seconds  median time from a batch's first send to its
//	batch_latency_p99_seconds  settled answer, and the 99th percentile
//	                           (nearest rank over the run's batches)
type SLI struct {
	RetryRate       *float64 `json:"retry_rate"`
	TimeoutRate     *float64 `json:"timeout_rate"`
	DedupReplayRate *float64 `json:"dedup_replay_rate"`
	BatchLatencyP50 *float64 `json:"batch_latency_p50_seconds"`
	BatchLatencyP99 *float64 `json:"batch_latency_p99_seconds"`
}

func sliOf(c Counts, m *metricsfile.Metrics) SLI {
	ratio := func(n, d int) *float64 {
		if d <= 0 {
			return nil
		}
		r := float64(n) / float64(d)
		return &r
	}
	s := SLI{
		RetryRate:       ratio(c.Resends, c.Requests),
		TimeoutRate:     ratio(c.Timeouts, c.Requests),
		DedupReplayRate: ratio(c.Replayed, c.Batches),
	}
	if d, ok := m.BatchLatency(0.5); ok {
		v := d.Seconds()
		s.BatchLatencyP50 = &v
	}
	if d, ok := m.BatchLatency(0.99); ok {
		v := d.Seconds()
		s.BatchLatencyP99 = &v
	}
	return s
}
