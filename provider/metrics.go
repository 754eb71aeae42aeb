package provider

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics live in a registry of their own, so several servers can run in
// one test process.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	batches  prometheus.Counter
	tiles    *prometheus.CounterVec
	faults   *prometheus.CounterVec
	replays  prometheus.Counter
	// collected and gcErrors count operation records the GC deleted and
	// GC runs that failed.
	collected prometheus.Counter
	gcErrors  prometheus.Counter
	// running is the batches executing now (key live, tiles being
	// checked and stored): the chaos soak crashes things while it is > 0.
	running prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tileprovider_requests_total", Help: "HTTP requests by route and status."}, []string{"route", "status"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tileprovider_batches_total", Help: "Batches run (replays not counted)."}),
		tiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tileprovider_tiles_total", Help: "Tiles answered, by result."}, []string{"result"}),
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tileprovider_faults_injected_total", Help: "Faults injected, by kind."}, []string{"kind"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tileprovider_replays_total", Help: "Answers replayed for a known key."}),
		collected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tileprovider_operation_records_collected_total", Help: "Expired operation records deleted by the GC."}),
		gcErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tileprovider_operation_gc_errors_total", Help: "Operation GC runs that failed."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tileprovider_batches_running", Help: "Batches executing now (replays not included)."}),
	}
	m.reg.MustRegister(m.requests, m.batches, m.tiles, m.faults, m.replays, m.collected, m.gcErrors, m.running)
	return m
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// route counts a route's answers by status.
func (s *Server) route(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		status := sw.status
		if status == 0 {
			status = -1 // no answer (connection dropped on purpose)
		}
		if sw.Header().Get("Idempotent-Replayed") == "true" {
			s.metrics.replays.Inc()
		}
		s.metrics.requests.WithLabelValues(name, strconv.Itoa(status)).Inc()
	})
}

// statusWriter remembers the status; Unwrap lets ResponseController reach
// the connection for hijacking.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
	w.ResponseWriter.WriteHeader(s)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
