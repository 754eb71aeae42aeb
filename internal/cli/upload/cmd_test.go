package upload

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/metricsfile"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/uploader"
)

// parse parses args as upload-pending's command line on the default
// configuration and returns the options the run would get, without running.
func parse(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	ios, _, _, _ := iostreams.Test()
	var got *Options
	cmd := newCommand(ios, *config.Default(func(string) string { return "" }), args,
		func(_ context.Context, o *Options) error { got = o; return nil })
	err := cmd.ExecuteContext(context.Background())
	return got, err
}

// settingsFrom is the configuration and retry configuration a run with
// the command line args works with.
func settingsFrom(t *testing.T, args ...string) (*config.Config, retrydecorator.Config, error) {
	t.Helper()
	o, err := parse(t, args...)
	if err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	c, err := o.Config()
	if err != nil {
		return nil, retrydecorator.Config{}, err
	}
	return c, retryConfig(c), nil
}

func TestFlagsParseAndOnlySetFlagsOverrideConfig(t *testing.T) {
	args := []string{"--flight", "F1", "--concurrency", "8", "--max-in-call-retries", "0", "--backoff-cap", "10s", "-o", "json"}
	o, err := parse(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, rc, err := settingsFrom(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if o.FlightID != "F1" || o.Output != "json" || cfg.Upload.Concurrency != 8 || rc.MaxInCallRetries != 0 || rc.BackoffCap != 10*time.Second {
		t.Errorf("parsed %+v / %+v / %+v", o, cfg.Upload, rc)
	}
	if rc.MaxPerTileAttempts != 5 || rc.BackoffBase != 2*time.Second || cfg.Upload.Deadline != 30*time.Minute {
		t.Errorf("unset flags changed config: %+v deadline %s", rc, cfg.Upload.Deadline)
	}
	if got := cfg.Source("upload.concurrency").String(); got != "flag --concurrency" {
		t.Errorf("upload.concurrency from %q, want the flag", got)
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-o", "yaml"},
		{"--flight", "bad flight/../id"},
	} {
		_, err := parse(t, args...)
		if code := exitcode.Code(err); code != exitcode.Usage {
			t.Errorf("%v: exit %d (%v), want 2", args, code, err)
		}
	}
}

// Flags that set a configuration field are refused by config.Validate,
// like the same value from the file or the environment, naming the flag,
// with exit 2.
func TestConfigFlagsOutOfBoundsAreRefusedNamingTheFlag(t *testing.T) {
	for _, args := range [][]string{
		{"--concurrency", "0"},
		{"--concurrency", "300000"},
		{"--batch-size", "10001"},
		{"--max-per-tile-attempts", "0"},
		{"--max-in-call-retries", "101"},
		{"--backoff-base", "-1s"},
		{"--deadline", "0s"},
		{"--order", "random"},
	} {
		_, _, err := settingsFrom(t, args...)
		if exitcode.Code(err) != exitcode.Usage || !strings.Contains(err.Error(), "(from flag "+args[0]+")") {
			t.Errorf("%v: error %v (exit %d), want exit 2 naming %s", args, err, exitcode.Code(err), args[0])
		}
	}
}

func TestRetryConfigThatFailsValidationIsAUsageError(t *testing.T) {
	if _, _, err := settingsFrom(t, "--backoff-base", "1m"); err != nil {
		t.Fatalf("base == cap should be valid: %v", err)
	}
	_, _, err := settingsFrom(t, "--backoff-base", "2m")
	if exitcode.Code(err) != exitcode.Usage {
		t.Fatalf("base above cap: %v (exit %d), want exit 2", err, exitcode.Code(err))
	}
}

func TestUnknownFlightExitsOne(t *testing.T) {
	r := newCmdRig(t)
	res := r.run(func(o *Options) { o.FlightID = "NOPE" })
	if res.code != exitcode.Failure {
		t.Fatalf("exit %d (%v), want 1", res.code, res.err)
	}
}

func TestProgressLogsOnEachTickWhenNotATerminal(t *testing.T) {
	var logs bytes.Buffer
	tick := make(chan time.Time)
	p := newProgress("F1", 10, 1000, nil, false, zerolog.New(&logs),
		func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} }, 5*time.Second, metricsfile.New(), time.Now)
	p.batch(uploader.BatchProgress{Tiles: 4, Bytes: 400, Uploaded: 3, Latency: time.Second})
	p.hooks().OnRetry(retrydecorator.RetryEvent{FlightID: "F1", Attempt: 1})
	tick <- time.Now() // received by the logging goroutine
	p.finish()
	out := logs.String()
	for _, want := range []string{`"message":"upload progress"`, `"tiles_done":3`, `"tiles_total":10`, `"bytes_done":300`, `"retries":1`} {
		if !strings.Contains(out, want) {
			t.Errorf("progress log lacks %s:\n%s", want, out)
		}
	}
}

func TestProgressDrawsTileCountsAndACountdownOnATerminal(t *testing.T) {
	var errOut bytes.Buffer
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	p := newProgress("F1", 10, 1000, iostreams.NewStatusLine(&errOut, func() int { return 200 }), false, zerolog.Nop(),
		func(time.Duration) (<-chan time.Time, func()) {
			t.Fatal("log ticker used on a terminal")
			return nil, nil
		},
		5*time.Second, metricsfile.New(), func() time.Time { return now })
	p.batch(uploader.BatchProgress{Tiles: 4, Bytes: 400, Uploaded: 4})
	p.hooks().OnRetry(retrydecorator.RetryEvent{FlightID: "F1", Attempt: 1, Sleep: 4 * time.Second, Pending: 6, Rejected: 2})
	if got := p.line(); !strings.Contains(got, "4/10 tiles") || !strings.Contains(got, "retrying in 4s (6 pending, 2 rejected)") {
		t.Errorf("status %q, want the tile count and the countdown", got)
	}
	now = now.Add(3 * time.Second)
	if got := p.line(); !strings.Contains(got, "retrying in 1s") {
		t.Errorf("status %q, want the countdown at 1s", got)
	}
	p.finish()
	if !strings.HasSuffix(errOut.String(), "\r\x1b[K") {
		t.Errorf("stderr %q does not end by erasing the status line", errOut.String())
	}
}

func TestProgressShowsSettlingOpenBatchesInPlaceOnATerminal(t *testing.T) {
	var errOut, logs bytes.Buffer
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	p := newProgress("F1", 10, 1000, iostreams.NewStatusLine(&errOut, func() int { return 200 }), false, zerolog.New(&logs),
		func(time.Duration) (<-chan time.Time, func()) {
			t.Fatal("log ticker used on a terminal")
			return nil, nil
		},
		5*time.Second, metricsfile.New(), func() time.Time { return now })
	p.settle(uploader.SettlingProgress{Open: 2})
	if got := p.line(); !strings.Contains(got, "settling 2 open batches") {
		t.Errorf("status %q, want the settling state", got)
	}
	if !strings.Contains(errOut.String(), "settling 2 open batches") {
		t.Errorf("stderr %q: the settling state was not drawn when it began", errOut.String())
	}
	p.hooks().OnRetry(retrydecorator.RetryEvent{FlightID: "F1", Attempt: 1, Sleep: 4 * time.Second, Pending: 6, Rejected: 2})
	if got := p.line(); !strings.Contains(got, "retrying in 4s") {
		t.Errorf("status %q, want a retry's countdown over the settling state", got)
	}
	now = now.Add(5 * time.Second)
	p.batch(uploader.BatchProgress{Tiles: 4, Bytes: 400, Uploaded: 4, Replayed: true})
	if got := p.line(); !strings.Contains(got, "4/10 tiles") || !strings.Contains(got, "settling 2 open batches") {
		t.Errorf("status %q, want the settling state back once the countdown ran out and a batch settled", got)
	}
	p.settle(uploader.SettlingProgress{Open: 2, Done: true})
	if got := p.line(); !strings.Contains(got, "uploading") || strings.Contains(got, "settling") {
		t.Errorf("status %q, want uploading once the open batches are settled", got)
	}
	p.finish()
	if logs.Len() != 0 {
		t.Errorf("log lines on a terminal: %s", logs.String())
	}
}

func TestProgressLogsSettlingOpenBatchesWhenNotATerminal(t *testing.T) {
	var logs bytes.Buffer
	p := newProgress("F1", 10, 1000, nil, false, zerolog.New(&logs),
		func(time.Duration) (<-chan time.Time, func()) { return make(chan time.Time), func() {} }, 5*time.Second, metricsfile.New(), time.Now)
	p.settle(uploader.SettlingProgress{Open: 1})
	if got := p.stateText(); got != "settling 1 open batch" {
		t.Errorf("state %q, want the settling state in the periodic log lines", got)
	}
	p.settle(uploader.SettlingProgress{Open: 1, Done: true})
	p.finish()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"message":"settling the batches an earlier run left open"`) ||
		!strings.Contains(lines[1], `"message":"settled the batches an earlier run left open"`) {
		t.Fatalf("log %q, want one line when settling starts and one when it is done", lines)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"open_batches":1`) || !strings.Contains(l, `"flight_id":"F1"`) {
			t.Errorf("log line %s lacks the flight or the number of open batches", l)
		}
	}
}

func TestDeadlineEndsTheRunWithExitOneAndSaysSo(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", "on_ground", 2)
	res := r.run(func(o *Options) { o.FlightID = "F1" }, "--deadline", "1ns")
	if res.code != exitcode.Failure || !strings.Contains(errString(res.err), "deadline of 1ns reached") {
		t.Fatalf("exit %d (%v), want 1 naming the deadline", res.code, res.err)
	}
	if r.prov.Posts() != 0 {
		t.Errorf("sent %d batches after the deadline", r.prov.Posts())
	}
}

func TestMetricsFileThatCannotBeWrittenExitsOneAfterTheUpload(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", "on_ground", 2)
	res := r.run(func(o *Options) {
		jsonOut(o)
		o.FlightID = "F1"
	}, "--metrics-file", r.dir+"/missing-dir/m.prom")
	if res.code != exitcode.Failure {
		t.Fatalf("exit %d (%v), want 1", res.code, res.err)
	}
	if m := decodeSummary(t, res.stdout); m["uploaded"] != 2.0 || m["exit_code"] != 1.0 || m["error"] == nil {
		t.Errorf("summary %v, want the upload reported with exit_code 1 and the error", m)
	}
}

func TestProgressShowsATotalNotYetCountedAsUnknownNotZero(t *testing.T) {
	var logs bytes.Buffer
	tick := make(chan time.Time)
	p := newProgress("F1", -1, 0, nil, false, zerolog.New(&logs),
		func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} }, 5*time.Second, metricsfile.New(), time.Now)
	p.batch(uploader.BatchProgress{Tiles: 4, Bytes: 400, Uploaded: 4})
	if got := p.line(); !strings.Contains(got, "4/? tiles") {
		t.Errorf("status %q, want 4/? tiles before the count arrives", got)
	}
	tick <- time.Now()
	// The ticker's goroutine takes a second tick only once it has logged
	// the first: the count below then cannot reach that log line first.
	tick <- time.Now()
	p.setTotal(10, 1000)
	if got := p.line(); !strings.Contains(got, "4/10 tiles") {
		t.Errorf("status %q, want 4/10 tiles once counted", got)
	}
	p.finish()
	if out := logs.String(); !strings.Contains(out, `"tiles_total":null`) || !strings.Contains(out, `"bytes_total":null`) {
		t.Errorf("progress log before the count %s, want null totals", out)
	}
}

func TestProgressShowsWhoseBatchesTheRunWaitsForAndUntilWhen(t *testing.T) {
	var errOut bytes.Buffer
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.Local)
	p := newProgress("F1", 10, 1000, iostreams.NewStatusLine(&errOut, func() int { return 300 }), false, zerolog.Nop(),
		func(time.Duration) (<-chan time.Time, func()) { return make(chan time.Time), func() {} },
		5*time.Second, metricsfile.New(), func() time.Time { return now })
	until := time.Date(2026, 11, 22, 21, 4, 5, 0, time.Local)
	p.holding(uploader.Held{Tiles: 120, Until: until, Holders: []uploader.Holder{
		{RunID: "3f9c", Host: "ground-1", PID: 4242, Tiles: 100, LeaseEnds: until},
		{RunID: "77aa", Host: "ground-2", PID: 17, Tiles: 20, LeaseEnds: until.Add(time.Minute)}}})
	want := "waiting for 120 tiles held by run 3f9c (ground-1, pid 4242) until 21:04:05 and 1 other run"
	if got := p.line(); !strings.Contains(got, want) {
		t.Errorf("status %q, want %q", got, want)
	}
	if !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr %q: the wait was not drawn when it began", errOut.String())
	}
	p.holding(uploader.Held{})
	if got := p.line(); !strings.Contains(got, "uploading") {
		t.Errorf("status %q, want uploading once the wait ended", got)
	}
	p.finish()
}
