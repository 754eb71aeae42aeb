// Package metricsfile collects one upload-pending run's metrics and writes
// them as a Prometheus text-format file (for node_exporter's textfile
// collector or a CI artefact).
//
// It promises: the file is replaced atomically (a temp file in the same
// directory, fsynced, renamed over the target), is mode 0644 so that
// node_exporter, running as another user, can read it (it holds counts,
// never the token), and no temp file is left behind whether the write
// succeeds or fails. Per-flight series carry a flight label
// (tilectl_upload_*, tilectl_last_run_*); the run-wide tilectl_* series
// without it are kept for dashboards that use them.
package metricsfile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Tile outcomes, the values of tilectl_tiles_total's outcome label.
const (
	OutcomeAccepted  = "accepted"
	OutcomeDuplicate = "duplicate"
	OutcomeRejected  = "rejected"
	OutcomeGivenUp   = "given_up"
)

// Counts is what a finished run adds to the counters.
type Counts struct {
	Accepted, Duplicate, Rejected, GivenUp int
	Retries, Timeouts, Replayed            int
	// Concurrency is the limit on batches in flight as the flight's run
	// ended; the gauge keeps the highest of the run's flights.
	Concurrency int
}

// Metrics is one run's collector. It is safe for concurrent use.
type Metrics struct {
	reg      *prometheus.Registry
	tiles    *prometheus.CounterVec
	retries  prometheus.Counter
	giveups  prometheus.Counter
	timeouts prometheus.Counter
	replayed prometheus.Counter
	latency  prometheus.Histogram
	conc     prometheus.Gauge
	concMax  int
	mu       sync.Mutex
	rate     prometheus.Gauge // nil until SetRate
	rateOnce sync.Once
	sli      *sliSeries
	flights  flightSeries
}

// New returns a collector with every series present at zero, so a file from
// a run that did nothing still has the full shape.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		tiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tilectl_tiles_total", Help: "Tiles by upload outcome in this run.",
		}, []string{"outcome"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tilectl_retries_total", Help: "In-call retries made by the retry decorator.",
		}),
		giveups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tilectl_giveups_total", Help: "Tiles moved to upload_giveup in this run.",
		}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tilectl_timeouts_total", Help: "HTTP attempts that timed out.",
		}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tilectl_replayed_answers_total", Help: "Batch answers the provider replayed (Idempotent-Replayed: true).",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tilectl_batch_latency_seconds",
			Help:    "Time from a batch's first send to its settled answer.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
		}),
	}
	m.conc = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tilectl_upload_concurrency",
		Help: "Limit on batches in flight as the run's uploads ended (upload.concurrency: adaptive or fixed).",
	})
	m.reg.MustRegister(m.tiles, m.retries, m.giveups, m.timeouts, m.replayed, m.latency, m.conc)
	m.sli = newSLISeries(m.reg)
	m.flights = newFlightSeries(m.reg)
	for _, o := range []string{OutcomeAccepted, OutcomeDuplicate, OutcomeRejected, OutcomeGivenUp} {
		m.tiles.WithLabelValues(o)
	}
	return m
}

// Add adds a finished flight's counts.
func (m *Metrics) Add(c Counts) {
	m.tiles.WithLabelValues(OutcomeAccepted).Add(float64(c.Accepted))
	m.tiles.WithLabelValues(OutcomeDuplicate).Add(float64(c.Duplicate))
	m.tiles.WithLabelValues(OutcomeRejected).Add(float64(c.Rejected))
	m.tiles.WithLabelValues(OutcomeGivenUp).Add(float64(c.GivenUp))
	m.giveups.Add(float64(c.GivenUp))
	m.retries.Add(float64(c.Retries))
	m.timeouts.Add(float64(c.Timeouts))
	m.replayed.Add(float64(c.Replayed))
	m.mu.Lock()
	m.concMax = max(m.concMax, c.Concurrency)
	m.conc.Set(float64(m.concMax))
	m.mu.Unlock()
}

// SetRate records the run's upload rate: bytes sent per second of its
// flights' upload time. A run that measured none leaves the series out
// (unknown is no sample, never a 0).
func (m *Metrics) SetRate(bytesPerSecond float64) {
	m.rateOnce.Do(func() {
		m.rate = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tilectl_upload_rate_bytes_per_second",
			Help: "Bytes sent per second of the run's upload time.",
		})
		m.reg.MustRegister(m.rate)
	})
	m.rate.Set(bytesPerSecond)
}

// ObserveBatch records one settled batch's latency.
func (m *Metrics) ObserveBatch(d time.Duration) {
	m.latency.Observe(d.Seconds())
	m.sli.observe(d)
}

// Encode returns the metrics in Prometheus text format.
func (m *Metrics) Encode() ([]byte, error) {
	m.sli.setQuantiles()
	mfs, err := m.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			return nil, fmt.Errorf("encode metric %s: %w", mf.GetName(), err)
		}
	}
	return buf.Bytes(), nil
}

// WriteFile replaces path with the metrics, atomically, mode 0644.
func (m *Metrics) WriteFile(path string) error {
	b, err := m.Encode()
	if err != nil {
		return err
	}
	return writeAtomic(path, b)
}

func writeAtomic(path string, b []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write metrics file %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// CreateTemp makes 0600; node_exporter's textfile collector runs as
	// its own user and must read the file.
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("write metrics file %s: %w", path, err)
	}
	if _, err = f.Write(b); err != nil {
		return fmt.Errorf("write metrics file %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write metrics file %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write metrics file %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write metrics file %s: %w", path, err)
	}
	return nil
}
