package metricsfile

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of tilectl_upload_tiles_total's result label. rejected counts
// tiles the provider rejected at least once in the run (its rejection
// events are tilectl_upload_rejections_total).
const (
	ResultAccepted  = "accepted"
	ResultDuplicate = "duplicate"
	ResultRejected  = "rejected"
	ResultGivenUp   = "given_up"
)

// FlightRun is one flight's part of a finished run.
type FlightRun struct {
	Flight                                      string
	Accepted, Duplicate, RejectedTiles, GivenUp int
	Rejections                                  int
	Bytes                                       int64
	Duration                                    time.Duration
	Finished                                    time.Time
	Success                                     bool
	// Pending is the flight's tiles still pending after the run, those in
	// other runs' open batches included; nil when the run could not count
	// them, which leaves the flight without a
	// tilectl_upload_pending_tiles sample (absent, not 0 or NaN).
	Pending *int
	// NextRetryAt is when a later run may go on with what this one left
	// (the run's next_retry_at); nil for none.
	NextRetryAt *time.Time
}

// flightSeries are the per-flight series node_exporter's textfile
// collector serves: an alert can say which flight is stuck.
type flightSeries struct {
	tiles      *prometheus.CounterVec
	rejections *prometheus.CounterVec
	bytes      *prometheus.CounterVec
	duration   *prometheus.GaugeVec
	lastRun    *prometheus.GaugeVec
	success    *prometheus.GaugeVec
	pending    *prometheus.GaugeVec
	nextRetry  *prometheus.GaugeVec
}

func newFlightSeries(reg *prometheus.Registry) flightSeries {
	f := flightSeries{
		tiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tilectl_upload_tiles_total", Help: "Tiles by result in the flight's last upload-pending run.",
		}, []string{"flight", "result"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tilectl_upload_rejections_total", Help: "Rejection events (a tile may be rejected more than once) in the flight's last run.",
		}, []string{"flight"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tilectl_upload_bytes_total", Help: "Bytes sent for the flight in its last run.",
		}, []string{"flight"}),
		duration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tilectl_upload_duration_seconds", Help: "How long the flight's last run took.",
		}, []string{"flight"}),
		lastRun: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tilectl_last_run_timestamp_seconds", Help: "When the flight's last run ended (Unix time).",
		}, []string{"flight"}),
		success: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tilectl_last_run_success", Help: "1 when the flight's last run uploaded everything, else 0.",
		}, []string{"flight"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tilectl_upload_pending_tiles", Help: "Tiles of the flight still pending after its last run, those in other runs' open batches included; absent when that run could not count them.",
		}, []string{"flight"}),
		nextRetry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tilectl_upload_next_retry_timestamp_seconds",
			Help: "When a later run may go on with what the flight's last run left (Unix time); absent when nothing waits.",
		}, []string{"flight"}),
	}
	reg.MustRegister(f.tiles, f.rejections, f.bytes, f.duration, f.lastRun, f.success, f.pending, f.nextRetry)
	return f
}

// AddFlight records one flight's part of the run.
func (m *Metrics) AddFlight(r FlightRun) {
	f := m.flights
	for result, n := range map[string]int{ResultAccepted: r.Accepted, ResultDuplicate: r.Duplicate,
		ResultRejected: r.RejectedTiles, ResultGivenUp: r.GivenUp} {
		f.tiles.WithLabelValues(r.Flight, result).Add(float64(n))
	}
	f.rejections.WithLabelValues(r.Flight).Add(float64(r.Rejections))
	f.bytes.WithLabelValues(r.Flight).Add(float64(r.Bytes))
	f.duration.WithLabelValues(r.Flight).Set(r.Duration.Seconds())
	f.lastRun.WithLabelValues(r.Flight).Set(float64(r.Finished.UnixNano()) / 1e9)
	success := 0.0
	if r.Success {
		success = 1
	}
	f.success.WithLabelValues(r.Flight).Set(success)
	if r.Pending != nil {
		f.pending.WithLabelValues(r.Flight).Set(float64(*r.Pending))
	}
	if r.NextRetryAt != nil {
		f.nextRetry.WithLabelValues(r.Flight).Set(float64(r.NextRetryAt.UnixNano()) / 1e9)
	}
}
