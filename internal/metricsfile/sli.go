package metricsfile

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Traffic is what a finished flight's HTTP requests add to the SLI
// counters: every request the uploader made, GETs
// and resends included.
type Traffic struct {
	Requests, FirstAttempts, Resends int
	ResendsRefused, BreakerOpenings  int
}

// sliSeries are the request counters and the batch latency quantiles from
// which the retry_rate and timeout_rate follow
// (tilectl_resends_total / tilectl_requests_total, tilectl_timeouts_total /
// tilectl_requests_total).
type sliSeries struct {
	requests, firstAttempts, resends, refused, openings prometheus.Counter
	quantiles                                           *prometheus.GaugeVec

	mu      sync.Mutex
	samples []time.Duration
}

func newSLISeries(reg *prometheus.Registry) *sliSeries {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	s := &sliSeries{
		requests:      counter("tilectl_requests_total", "HTTP requests sent to the provider, resends included."),
		firstAttempts: counter("tilectl_first_attempts_total", "HTTP requests that were not resends."),
		resends:       counter("tilectl_resends_total", "HTTP requests that resent an earlier one (same key and body)."),
		refused:       counter("tilectl_resends_refused_total", "Resends the run's retry budget refused (the batch was left open)."),
		openings:      counter("tilectl_breaker_openings_total", "Times the provider circuit breaker opened."),
		quantiles: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tilectl_batch_latency_quantile_seconds",
			Help: "Batch latency (first send to settled answer) at the quantile, over this run's batches; absent when no batch was answered.",
		}, []string{"quantile"}),
	}
	reg.MustRegister(s.requests, s.firstAttempts, s.resends, s.refused, s.openings, s.quantiles)
	return s
}

// AddTraffic adds a finished flight's request counts.
func (m *Metrics) AddTraffic(t Traffic) {
	m.sli.requests.Add(float64(t.Requests))
	m.sli.firstAttempts.Add(float64(t.FirstAttempts))
	m.sli.resends.Add(float64(t.Resends))
	m.sli.refused.Add(float64(t.ResendsRefused))
	m.sli.openings.Add(float64(t.BreakerOpenings))
}

// BatchLatency is the q-quantile (nearest rank) of the batch latencies
// observed so far; ok is false when there are none.
func (m *Metrics) BatchLatency(q float64) (d time.Duration, ok bool) {
	m.sli.mu.Lock()
	defer m.sli.mu.Unlock()
	return quantile(m.sli.samples, q)
}

func (s *sliSeries) observe(d time.Duration) {
	s.mu.Lock()
	s.samples = append(s.samples, d)
	s.mu.Unlock()
}

// setQuantiles fills the quantile gauges before the file is written.
func (s *sliSeries) setQuantiles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range []struct {
		label string
		q     float64
	}{{"0.5", 0.5}, {"0.99", 0.99}} {
		if d, ok := quantile(s.samples, q.q); ok {
			s.quantiles.WithLabelValues(q.label).Set(d.Seconds())
		}
	}
}

func quantile(samples []time.Duration, q float64) (time.Duration, bool) {
	if len(samples) == 0 {
		return 0, false
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1], true
}
