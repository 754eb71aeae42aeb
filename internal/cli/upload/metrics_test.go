package upload

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/tilestore"
)

// seriesValue finds the sample of family name whose labels are exactly want.
func seriesValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	fam, ok := fams[name]
	if !ok {
		t.Fatalf("no %s in the metrics file", name)
	}
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if len(got) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			match = match && got[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s%v in the metrics file", name, want)
	return 0
}

func TestMetricsFileFromConfigParsesWithAFlightLabelForNodeExporter(t *testing.T) {
	r := newCmdRig(t, "F1-t001")
	r.seed("F1", tilestore.FlightOnGround, 4)
	path := filepath.Join(t.TempDir(), "tilectl.prom")
	r.cfg.Upload.MetricsFile = path // upload.metrics_file, no flag
	before := time.Now()
	res := r.run(func(o *Options) {
		o.FlightID = "F1"
	}, "--max-per-tile-attempts", "1")
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3\n%s", res.code, res.err, res.stderr)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("metrics file from upload.metrics_file: %v", err)
	}
	defer f.Close()
	st, _ := f.Stat()
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644: node_exporter runs as another user", st.Mode().Perm())
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("the Prometheus text parser refuses the file: %v", err)
	}
	fl := map[string]string{"flight": "F1"}
	for result, want := range map[string]float64{"accepted": 3, "duplicate": 0, "rejected": 1, "given_up": 1} {
		if got := seriesValue(t, fams, "tilectl_upload_tiles_total", map[string]string{"flight": "F1", "result": result}); got != want {
			t.Errorf("tilectl_upload_tiles_total{flight=F1,result=%s} = %v, want %v", result, got, want)
		}
	}
	if got := seriesValue(t, fams, "tilectl_upload_bytes_total", fl); got <= 0 {
		t.Errorf("tilectl_upload_bytes_total = %v, want the bytes sent", got)
	}
	if got := seriesValue(t, fams, "tilectl_upload_duration_seconds", fl); got < 0 || got > 60 {
		t.Errorf("tilectl_upload_duration_seconds = %v", got)
	}
	if got := seriesValue(t, fams, "tilectl_last_run_timestamp_seconds", fl); got < float64(before.Unix()) {
		t.Errorf("tilectl_last_run_timestamp_seconds = %v, want at least %d", got, before.Unix())
	}
	if got := seriesValue(t, fams, "tilectl_upload_rate_bytes_per_second", map[string]string{}); got <= 0 {
		t.Errorf("tilectl_upload_rate_bytes_per_second = %v, want the run's rate", got)
	}
	if got := seriesValue(t, fams, "tilectl_last_run_success", fl); got != 0 {
		t.Errorf("tilectl_last_run_success = %v, want 0 (a tile was given up)", got)
	}
	if fams["tilectl_last_run_success"].GetType() != dto.MetricType_GAUGE || fams["tilectl_upload_tiles_total"].GetType() != dto.MetricType_COUNTER {
		t.Error("wrong metric types")
	}
}
