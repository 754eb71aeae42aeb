package fdrcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// ring writes three give-ups and two other records, in that interleaving.
func ring(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fdr.ring")
	now := t0.Add(-time.Second) // Open stamps the creation time first
	r, err := fdr.Open(context.Background(), path, fdr.Options{Capacity: fdr.MinCapacity, Now: func() time.Time { now = now.Add(time.Second); return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i, e := range []fdr.Entry{
		{Kind: "upload.giveup", Key: "giveup/t1/5", Payload: map[string]any{"tile_id": "t1", "flight_id": "f1", "attempts": 5, "last_rejection_reason": "checksum_mismatch"}},
		{Kind: "run.start", Payload: map[string]string{"flight_id": "f1"}},
		{Kind: "upload.giveup", Key: "giveup/t2/5", Payload: map[string]any{"tile_id": "t2", "attempts": 5}},
		{Kind: "run.end"},
		{Kind: "upload.giveup", Key: "giveup/t3/5", Payload: map[string]any{"tile_id": "t3", "attempts": 5}},
	} {
		if _, err := r.Append(context.Background(), e); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	return path
}

func run(t *testing.T, opts *TailOptions) (string, string) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	opts.IO = ios
	if opts.Output == "" {
		opts.Output = "text"
	}
	if err := tailRun(context.Background(), opts); err != nil {
		t.Fatalf("tailRun: %v (stderr %s)", err, errOut)
	}
	return out.String(), errOut.String()
}

func TestTailPrintsRecordsOldestFirst(t *testing.T) {
	t.Parallel()
	out, _ := run(t, &TailOptions{File: ring(t)})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	want := `2026-11-21T10:00:01Z #1 upload.giveup key=giveup/t1/5 {"attempts":5,"flight_id":"f1","last_rejection_reason":"checksum_mismatch","tile_id":"t1"}`
	if lines[0] != want {
		t.Errorf("line 1 = %s\nwant     %s", lines[0], want)
	}
	if lines[3] != "2026-11-21T10:00:04Z #4 run.end null" {
		t.Errorf("line 4 = %s", lines[3])
	}
}

func TestTailJSONFiltersByKindAndKeepsTheLastN(t *testing.T) {
	t.Parallel()
	out, _ := run(t, &TailOptions{File: ring(t), Kind: "upload.giveup", N: 2, Output: "json"})
	var got []map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		got = append(got, m)
	}
	if len(got) != 2 || strings.Count(out, "\n") != 2 {
		t.Fatalf("want 2 lines, got:\n%s", out)
	}
	first := got[0]
	if first["seq"] != 3.0 || first["kind"] != "upload.giveup" || first["key"] != "giveup/t2/5" ||
		first["time"] != "2026-11-21T10:00:03Z" || first["payload"].(map[string]any)["tile_id"] != "t2" {
		t.Errorf("first = %v", first)
	}
	if got[1]["seq"] != 5.0 {
		t.Errorf("second = %v", got[1])
	}
}

func TestTailJSONHasStableFieldsEvenWhenEmpty(t *testing.T) {
	t.Parallel()
	out, _ := run(t, &TailOptions{File: ring(t), Kind: "run.end", Output: "json"})
	want := `{"seq":4,"kind":"run.end","key":"","time":"2026-11-21T10:00:04Z","payload":null}` + "\n"
	if out != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
}

func TestTailMissingFileIsNotAnError(t *testing.T) {
	t.Parallel()
	out, errOut := run(t, &TailOptions{Path: func() (string, error) { return filepath.Join(t.TempDir(), "none"), nil }})
	if out != "" || !strings.Contains(errOut, "no flight data recorder") {
		t.Errorf("out %q err %q", out, errOut)
	}
}

func TestTailFollowPrintsOnlyNewMatchingRecords(t *testing.T) {
	t.Parallel()
	path := ring(t)
	var gotAfter uint64
	opts := &TailOptions{File: path, Follows: true, Kind: "upload.giveup", N: 1,
		Follow: func(ctx context.Context, p string, after uint64, _ time.Duration, emit func(fdr.Record) error) error {
			gotAfter = after
			for _, r := range []fdr.Record{
				{Seq: 6, Kind: "run.start", Time: t0},
				{Seq: 7, Kind: "upload.giveup", Key: "giveup/t4/5", Time: t0, Payload: json.RawMessage(`{"tile_id":"t4"}`)},
			} {
				if err := emit(r); err != nil {
					return err
				}
			}
			return context.Canceled // what Ctrl-C looks like
		}}
	out, _ := run(t, opts)
	if gotAfter != 5 {
		t.Errorf("follow started after seq %d, want 5 (the newest of any kind)", gotAfter)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "#5 ") || !strings.Contains(lines[1], "#7 upload.giveup key=giveup/t4/5") {
		t.Errorf("output:\n%s", out)
	}
}

func TestTailReportsDamageOnStderr(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	reportDamage(&b, fdr.ReadReport{Skipped: 2, Gaps: [][2]uint64{{3, 3}, {7, 9}}})
	if got := b.String(); got != "fdr: skipped 2 damaged regions\nfdr: missing seq 3, 7-9\n" {
		t.Errorf("got %q", got)
	}
}

func TestTailCommandValidatesFlags(t *testing.T) {
	t.Parallel()
	ios, _, _, _ := iostreams.Test()
	f := factory.NewWith(ios, func(string) (string, bool) { return "", false }, "test", "")
	for _, args := range [][]string{{"-o", "yaml"}, {"-n", "-1"}, {"extra"}} {
		var ran bool
		cmd := NewCmdTail(f, func(context.Context, *TailOptions) error { ran = true; return nil })
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		if err := cmd.Execute(); err == nil || ran {
			t.Errorf("%v: err %v ran %v", args, err, ran)
		}
	}
	var got *TailOptions
	cmd := NewCmdTail(f, func(_ context.Context, o *TailOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"-f", "--kind", "upload.giveup", "-n", "10", "-o", "json", "--file", "/x/fdr.ring"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !got.Follows || got.Kind != "upload.giveup" || got.N != 10 || got.Output != "json" || got.File != "/x/fdr.ring" {
		t.Errorf("options %+v", got)
	}
}

func TestTailUsesTheConfiguredPath(t *testing.T) {
	t.Parallel()
	path := ring(t)
	ios, _, out, _ := iostreams.Test()
	env := map[string]string{"TILECTL_FDR_PATH": path, "TILECTL_CACHE_DIR": t.TempDir()}
	f := factory.NewWith(ios, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "test", "")
	cmd := NewCmdFDR(f)
	cmd.SetArgs([]string{"tail", "-n", "1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "#5 upload.giveup key=giveup/t3/5") {
		t.Errorf("output %q", out)
	}
}

// A ring that an earlier version wrote to holds give-ups under the kind it
// used then ("c11.upload.giveup"): they read under today's name, and the
// old name still selects them, beside today's records.
func TestRecordsOfAnEarlierVersionReadUnderTodaysKind(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fdr.ring")
	r, err := fdr.Open(context.Background(), path, fdr.Options{Capacity: fdr.MinCapacity})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []fdr.Entry{
		{Kind: "c11.upload.giveup", Key: "giveup/old/1", Payload: map[string]any{"tile_id": "old"}},
		{Kind: "upload.giveup", Key: "giveup/new/1", Payload: map[string]any{"tile_id": "new"}},
		{Kind: "c11.flight.landed", Payload: map[string]any{"flight_id": "f"}},
	} {
		if _, err := r.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	for _, kind := range []string{"upload.giveup", "c11.upload.giveup"} {
		out, _ := run(t, &TailOptions{File: path, Kind: kind, Output: "json"})
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], `"tile_id":"old"`) || !strings.Contains(lines[1], `"tile_id":"new"`) {
			t.Fatalf("--kind %s: want the old and the new give-up, got:\n%s", kind, out)
		}
		for _, l := range lines {
			if !strings.Contains(l, `"kind":"upload.giveup"`) {
				t.Errorf("--kind %s: a record not under today's kind: %s", kind, l)
			}
		}
	}
	out, _ := run(t, &TailOptions{File: path, Kind: "flight.landed"})
	if !strings.Contains(out, "flight.landed") || strings.Contains(out, "c11.") {
		t.Errorf("an old landing, read: %q", out)
	}
}
