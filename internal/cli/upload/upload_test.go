package upload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

func jsonOut(o *Options) { o.Output = "json" }

func decodeSummary(t *testing.T, stdout string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(stdout))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%s", stdout)
	}
	return m
}

func TestAllUploadedExitsZeroWithStableJSONSummary(t *testing.T) {
	r := newCmdRig(t)
	ids := r.seed("F1", tilestore.FlightOnGround, 12)
	res := r.run(func(o *Options) { jsonOut(o); o.FlightID = "F1" })
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v), want 0\n%s", res.code, res.err, res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	wantKeys := []string{"outcome", "exit_code", "dry_run", "retry_decorator", "uploaded", "accepted", "duplicate",
		"rejected", "rejected_tiles", "given_up", "still_pending", "still_pending_bytes", "retries", "batches", "bytes", "resends",
		"replayed", "timeouts", "next_retry_at", "error", "flights", "fdr",
		"requests", "first_attempts", "resends_refused", "breaker_openings", "concurrency", "sli", "local_failed", "local_failures", "rate_bytes_per_second"}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Sort(wantKeys)
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("summary keys %v, want %v", keys, wantKeys)
	}
	if m["outcome"] != "success" || m["exit_code"] != 0.0 || m["uploaded"] != 12.0 || m["still_pending"] != 0.0 ||
		m["retry_decorator"] != true || m["next_retry_at"] != nil || m["error"] != nil {
		t.Errorf("summary %v, want success with 12 uploaded", m)
	}
	if c, _ := m["concurrency"].(float64); c < 1 {
		t.Errorf("summary concurrency %v, want the limit in force (>= 1)", m["concurrency"])
	}
	fl := m["flights"].([]any)
	if len(fl) != 1 || fl[0].(map[string]any)["flight_id"] != "F1" || fl[0].(map[string]any)["outcome"] != "success" {
		t.Errorf("flights %v, want one F1 success", fl)
	}
	// The rate is bytes over the upload's time, for the run and the flight.
	for _, obj := range []map[string]any{m, fl[0].(map[string]any)} {
		if r, ok := obj["rate_bytes_per_second"].(float64); !ok || r <= 0 {
			t.Errorf("rate_bytes_per_second = %v, want a positive number", obj["rate_bytes_per_second"])
		}
	}
	for _, id := range ids {
		if s := r.status(id); s != "uploaded" {
			t.Errorf("tile %s is %s, want uploaded", id, s)
		}
	}
}

func TestGivenUpTileExitsThreeAndWritesMetricsFileAtomically(t *testing.T) {
	r := newCmdRig(t, "F1-t002")
	r.seed("F1", tilestore.FlightOnGround, 5)
	metrics := filepath.Join(r.dir, "out", "tilectl.prom")
	if err := os.MkdirAll(filepath.Dir(metrics), 0o700); err != nil {
		t.Fatal(err)
	}
	res := r.run(func(o *Options) {
		jsonOut(o)
		o.FlightID = "F1"
	}, "--max-in-call-retries", "5", "--max-per-tile-attempts", "2", "--metrics-file", metrics)
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3\n%s", res.code, res.err, res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	if m["outcome"] != "partial" || m["given_up"] != 1.0 || m["uploaded"] != 4.0 || m["retries"] != 1.0 || m["exit_code"] != 3.0 {
		t.Errorf("summary %v, want partial, 4 uploaded, 1 given up after 1 retry", m)
	}
	if s := r.status("F1-t002"); s != "upload_giveup" {
		t.Errorf("poison tile is %s, want upload_giveup", s)
	}
	// The flight's given-up tiles after the run, for the operator's review.
	if fl, _ := m["flights"].([]any); len(fl) != 1 || fl[0].(map[string]any)["give_ups_awaiting_review"] != 1.0 {
		t.Errorf("flights %v, want F1 with 1 give-up awaiting review", m["flights"])
	}
	if over, err := pgtest.RejectionsOverBudget(context.Background(), r.store.Pool(), "F1", 2); err != nil || len(over) > 0 {
		t.Errorf("tiles rejected by more distinct operations than the budget of 2: %v (%v)", over, err)
	}
	if !slices.Equal(r.clock.sleeps, []time.Duration{2 * time.Second}) {
		t.Errorf("sleeps %v, want [2s]", r.clock.sleeps)
	}
	recs, _, err := fdr.ReadFile(context.Background(), r.cfg.FDRPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Kind != "upload.giveup" || recs[0].Key != "giveup/F1-t002/1" {
		t.Errorf("FDR records %+v, want one upload.giveup for F1-t002, its first give-up", recs)
	}
	b, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`tilectl_tiles_total{outcome="accepted"} 4`, `tilectl_tiles_total{outcome="rejected"} 2`,
		`tilectl_tiles_total{outcome="given_up"} 1`, "tilectl_retries_total 1", "tilectl_giveups_total 1",
		"tilectl_batch_latency_seconds_count 2"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics file lacks %q:\n%s", want, b)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(metrics))
	if len(entries) != 1 {
		t.Errorf("metrics dir holds %d entries, want the file alone (no temp files)", len(entries))
	}
	if st, _ := os.Stat(metrics); st.Mode().Perm() != 0o644 {
		t.Errorf("metrics file mode %v, want 0644 (node_exporter reads it)", st.Mode().Perm())
	}
}

func TestAirborneFlightExitsFour(t *testing.T) {
	r := newCmdRig(t)
	ids := r.seed("F1", tilestore.FlightAirborne, 3)
	res := r.run(func(o *Options) { o.FlightID = "F1" })
	if res.code != exitcode.NotOnGround || !errors.Is(res.err, uploader.ErrFlightNotOnGround) {
		t.Fatalf("exit %d (%v), want 4", res.code, res.err)
	}
	if r.prov.Posts() != 0 || r.status(ids[0]) != "pending" {
		t.Errorf("posts %d, tile %s; want nothing sent", r.prov.Posts(), r.status(ids[0]))
	}
}

func TestARunWaitsForAnotherHostsLiveRunAndAtItsDeadlineExits3NamingIt(t *testing.T) {
	r := newCmdRig(t)
	ids := r.seed("F1", tilestore.FlightOnGround, 6)
	// Another, live run (another machine) has claimed the first two tiles.
	other := r.store.ForRun(tilestore.Run{ID: "run-on-hangar-7", Host: "hangar-7", PID: 4242, Lease: time.Hour})
	claimed, err := other.ClaimBatch(context.Background(), tilestore.Claim{FlightID: "F1", Limit: 2, OpID: "op-of-the-other-run",
		Pick: func(c []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
			return tilestore.Batch{OpID: "op-of-the-other-run", Fingerprint: "fp",
				TileIDs: []string{c[0].ID, c[1].ID}, SHA256s: []string{c[0].SHA256, c[1].SHA256}}, nil
		}})
	if err != nil || len(claimed.Tiles) != 2 {
		t.Fatalf("claim: %v %+v", err, claimed)
	}
	metrics := filepath.Join(r.dir, "m.prom")
	res := r.run(func(o *Options) { jsonOut(o); o.FlightID = "F1" }, "--deadline", "1s", "--metrics-file", metrics)
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3: the other run's tiles are still pending; stderr:\n%s", res.code, res.err, res.stderr)
	}
	if !strings.Contains(res.stderr, "waiting for 2 tiles held by run run-on-hangar-7 (hangar-7, pid 4242) until ") {
		t.Errorf("the wait was not announced:\n%s", res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	f := m["flights"].([]any)[0].(map[string]any)
	if f["uploaded"] != 4.0 || f["still_pending"] != 2.0 || f["held_by_other_runs"] != 2.0 || m["still_pending"] != 2.0 {
		t.Errorf("summary %v, want 4 uploaded, 2 still pending, 2 held by other runs", m)
	}
	until, err := time.Parse(time.RFC3339Nano, fmt.Sprint(f["held_until"]))
	if err != nil || time.Until(until) < 50*time.Minute {
		t.Errorf("held_until %v (%v), want the other run's lease end, about an hour from now", f["held_until"], err)
	}
	if fmt.Sprint(m["next_retry_at"]) != fmt.Sprint(f["held_until"]) || fmt.Sprint(f["next_retry_at"]) != fmt.Sprint(f["held_until"]) {
		t.Errorf("next_retry_at %v (flight %v), want the lease end %v", m["next_retry_at"], f["next_retry_at"], f["held_until"])
	}
	holders := f["held_by"].([]any)
	if len(holders) != 1 {
		t.Fatalf("held_by %v, want the other run", holders)
	}
	if h := holders[0].(map[string]any); h["run_id"] != "run-on-hangar-7" || h["host"] != "hangar-7" || h["pid"] != 4242.0 || h["tiles"] != 2.0 {
		t.Errorf("held_by %v, want run-on-hangar-7 on hangar-7, pid 4242, 2 tiles", h)
	}
	prom, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`tilectl_upload_pending_tiles{flight="F1"} 2`, `tilectl_last_run_success{flight="F1"} 0`} {
		if !strings.Contains(string(prom), want) {
			t.Errorf("metrics file lacks %s:\n%s", want, prom)
		}
	}
	for _, id := range ids[:2] {
		if got := r.status(id); got != "pending" {
			t.Errorf("tile %s of the live run's batch is %s, want pending (never touched)", id, got)
		}
	}
	for _, id := range ids[2:] {
		if got := r.status(id); got != "uploaded" {
			t.Errorf("tile %s is %s, want uploaded", id, got)
		}
	}
}

func TestDryRunSendsAndChangesNothing(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", tilestore.FlightOnGround, 7)
	snapshot := func() string {
		var s string
		err := r.store.Pool().QueryRow(context.Background(), `SELECT
			(SELECT string_agg(tile_id || voting_status || upload_attempts, ',' ORDER BY tile_id) FROM tiles) ||
			(SELECT count(*) FROM upload_batches)::text || (SELECT count(*) FROM upload_rejections)::text`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()
	metrics := filepath.Join(r.dir, "m.prom")
	res := r.run(func(o *Options) { jsonOut(o); o.DryRun = true }, "--metrics-file", metrics)
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v)\n%s", res.code, res.err, res.stderr)
	}
	if after := snapshot(); after != before {
		t.Errorf("dry run changed the database:\n before %s\n after  %s", before, after)
	}
	if r.prov.Posts() != 0 {
		t.Errorf("dry run sent %d batches", r.prov.Posts())
	}
	if _, err := os.Stat(r.cfg.FDRPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dry run created the FDR file (stat: %v)", err)
	}
	m := decodeSummary(t, res.stdout)
	f := m["flights"].([]any)[0].(map[string]any)
	if m["outcome"] != "dry_run" || f["still_pending"] != 7.0 || f["batches"] != 1.0 || f["bytes"].(float64) <= 0 {
		t.Errorf("dry-run summary %v, want 7 tiles in 1 batch", m)
	}
	// Nothing was sent: the rate is not known, not 0.
	if rate, ok := m["rate_bytes_per_second"]; !ok || rate != nil || f["rate_bytes_per_second"] != nil {
		t.Errorf("dry-run rate_bytes_per_second %v (flight %v), want null", rate, f["rate_bytes_per_second"])
	}
}

func TestNoRetryBypassesTheDecoratorAndLogsIt(t *testing.T) {
	r := newCmdRig(t, "F1-t001")
	r.seed("F1", tilestore.FlightOnGround, 3)
	res := r.run(func(o *Options) { o.FlightID, o.NoRetry = "F1", true })
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3", res.code, res.err)
	}
	if !strings.Contains(res.stderr, "retry decorator bypassed") || !strings.Contains(res.stderr, `"no_retry_flag":true`) {
		t.Errorf("stderr does not log the bypass:\n%s", res.stderr)
	}
	if r.prov.Posts() != 1 || len(r.clock.sleeps) != 0 {
		t.Errorf("posts %d sleeps %v, want one batch and no retry", r.prov.Posts(), r.clock.sleeps)
	}
	if !strings.Contains(res.stdout, "flight F1: partial in ") || !strings.Contains(res.stdout, ": 2 uploaded") {
		t.Errorf("text summary:\n%s", res.stdout)
	}
}

func TestWithoutFlightUploadsEveryLandedFlightWithPendingTiles(t *testing.T) {
	r := newCmdRig(t)
	r.seed("A", tilestore.FlightOnGround, 2)
	r.seed("B", tilestore.FlightOnGround, 3)
	air := r.seed("C", tilestore.FlightAirborne, 2)
	res := r.run(jsonOut)
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v)\n%s", res.code, res.err, res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	var got []string
	for _, f := range m["flights"].([]any) {
		got = append(got, f.(map[string]any)["flight_id"].(string))
	}
	if !slices.Equal(got, []string{"A", "B"}) || m["uploaded"] != 5.0 {
		t.Errorf("flights %v uploaded %v, want A and B with 5", got, m["uploaded"])
	}
	if r.status(air[0]) != "pending" {
		t.Errorf("airborne flight's tile was touched")
	}
}

func TestTokenNeverAppearsInOutputMetricsOrFDR(t *testing.T) {
	r := newCmdRig(t, "F1-t000")
	r.seed("F1", tilestore.FlightOnGround, 3)
	metrics := filepath.Join(r.dir, "m.prom")
	var outputs []string
	// The first run gives the poison tile up (FDR record); the second has
	// nothing left to send.
	for i, out := range []string{"json", "text"} {
		res := r.run(func(o *Options) {
			o.Output, o.FlightID = out, "F1"
		}, "--max-per-tile-attempts", "1", "--metrics-file", metrics)
		if want := []int{exitcode.Partial, exitcode.OK}[i]; res.code != want {
			t.Fatalf("-o %s: exit %d (%v), want %d", out, res.code, res.err, want)
		}
		outputs = append(outputs, res.stdout, res.stderr)
	}
	bad := r.run(func(o *Options) { o.FlightID = "F9" }) // an error path too
	outputs = append(outputs, bad.stdout, bad.stderr, errString(bad.err))
	for _, p := range []string{metrics, r.cfg.FDRPath} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(b))
	}
	if recs, _, err := fdr.ReadFile(context.Background(), r.cfg.FDRPath); err != nil || len(recs) != 1 {
		t.Fatalf("FDR holds %d records (%v), want the one give-up", len(recs), err)
	}
	for i, o := range outputs {
		if strings.Contains(o, testToken) {
			t.Errorf("output %d contains the provider token:\n%s", i, o)
		}
	}
	if auth := r.prov.Auth(); len(auth) == 0 || auth[0] != "Bearer "+testToken {
		t.Errorf("the token was not sent to the provider, so this test proves nothing: %v", auth)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestTransientRejectionsAreRetriedWithBackoffUntilUploaded(t *testing.T) {
	r := newCmdRig(t)
	r.prov.Busy("F1-t001", 2)
	r.prov.Busy("F1-t004", 1)
	r.seed("F1", tilestore.FlightOnGround, 6)
	res := r.run(func(o *Options) { jsonOut(o); o.FlightID = "F1" })
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v), want 0\n%s", res.code, res.err, res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	if m["uploaded"] != 6.0 || m["rejected"] != 3.0 || m["retries"] != 2.0 || m["given_up"] != 0.0 || m["outcome"] != "success" {
		t.Errorf("summary %v, want 6 uploaded after 3 rejections and 2 retries", m)
	}
	if !slices.Equal(r.clock.sleeps, []time.Duration{2 * time.Second, 4 * time.Second}) {
		t.Errorf("sleeps %v, want [2s 4s]", r.clock.sleeps)
	}
	if r.prov.Posts() != 3 {
		t.Errorf("posts %d, want 3 (each retry sends only what is still pending)", r.prov.Posts())
	}
	var attempts int
	if err := r.store.Pool().QueryRow(context.Background(), `SELECT upload_attempts FROM tiles WHERE tile_id = 'F1-t001'`).Scan(&attempts); err != nil || attempts != 2 {
		t.Errorf("F1-t001 attempts %d (%v), want 2", attempts, err)
	}
}

// An operator who sets nothing must not be warned on every run that the
// defaults cannot keep their own deadline.
func TestTheDefaultRetryScheduleFitsTheDefaultDeadlineWithoutAWarning(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", tilestore.FlightOnGround, 2)
	res := r.run(func(o *Options) { o.FlightID, o.StrictDeadline = "F1", true })
	if res.code != exitcode.OK {
		t.Fatalf("defaults with --strict-deadline: exit %d (%v), want 0", res.code, res.err)
	}
	if !strings.Contains(res.stderr, "retry schedule fits the deadline") || !strings.Contains(res.stderr, `"deadline":"30m0s"`) {
		t.Errorf("log does not say the default schedule fits the 30m deadline:\n%s", res.stderr)
	}
	if strings.Contains(res.stderr, "worst case is") {
		t.Errorf("a run on the defaults warns about its worst case:\n%s", res.stderr)
	}
}

// The deadline bounds the run whatever the schedule, and what it leaves
// goes with the next run: a worst case past it is logged, not warned.
func TestWorstCaseOfTheRetryScheduleIsLoggedWithoutAWarningWhenItExceedsTheDeadline(t *testing.T) {
	cases := []struct {
		name     string
		deadline time.Duration
		want     string
	}{
		// defaults: 3 retries, backoff 2 s..60 s, request timeout 60 s,
		// 5 HTTP resends backing off 0.5 s..8 s: one request is
		// 6 x 60 s + (0.5+1+2+4+8) s = 375.5 s; the run
		// 4 x 375.5 s + (2+4+8) s = 25m16s
		{"fits", 30 * time.Minute, `"worst_case":"25m16s"`},
		{"exceeds", 20 * time.Minute, "worst case is 25m16s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newCmdRig(t)
			r.cfg.Upload.Deadline = tc.deadline
			r.seed("F1", tilestore.FlightOnGround, 2)
			res := r.run(func(o *Options) { o.FlightID = "F1" })
			if res.code != exitcode.OK {
				t.Fatalf("exit %d (%v)", res.code, res.err)
			}
			if !strings.Contains(res.stderr, tc.want) {
				t.Errorf("log does not say %q:\n%s", tc.want, res.stderr)
			}
			noWarnings(t, res.stderr)
		})
	}
}

func TestStrictDeadlineRefusesToStartWhenTheWorstCaseExceedsTheDeadline(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", tilestore.FlightOnGround, 2)
	r.cfg.Upload.Deadline = 20 * time.Minute
	res := r.run(func(o *Options) { o.FlightID, o.StrictDeadline = "F1", true }) // defaults: 25m16s > 20m - 1m
	if res.code != exitcode.Usage || !strings.Contains(errString(res.err), "worst case is 25m16s") ||
		!strings.Contains(errString(res.err), "upload.deadline 20m0s (from default) minus a 1m0s margin") {
		t.Fatalf("exit %d (%v), want 2 naming the 25m16s bound and the deadline", res.code, res.err)
	}
	if n := r.prov.Posts(); n != 0 {
		t.Fatalf("%d batches sent, want none", n)
	}
	r.cfg.Upload.Deadline = time.Hour
	if res := r.run(func(o *Options) { o.FlightID, o.StrictDeadline = "F1", true }); res.code != exitcode.OK {
		t.Fatalf("with a 1 h deadline: exit %d (%v), want 0", res.code, res.err)
	}
}
