package upload

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/fdr/fdrtest"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/tilestore"
)

func TestARunWhoseGiveUpsOutgrowTheFDRRingSaysSoWithTheCapacityToSet(t *testing.T) {
	const n = 300 // ~300-byte records: more than a 64 KiB ring holds
	var reject []string
	for _, fl := range []string{"F1", "F2"} {
		for i := 0; i < n; i++ {
			reject = append(reject, fmt.Sprintf("%s-t%03d", fl, i))
		}
	}
	r := newCmdRig(t, reject...)
	r.cfg.FDRCapacityBytes = fdr.MinCapacity
	r.seed("F1", tilestore.FlightOnGround, n)
	r.seed("F2", tilestore.FlightOnGround, n)
	budget1 := []string{"--max-in-call-retries", "0", "--max-per-tile-attempts", "1"}

	res := r.run(func(o *Options) { jsonOut(o); o.FlightID = "F1" }, budget1...)
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3\n%s", res.code, res.err, res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	f, ok := m["fdr"].(map[string]any)
	if !ok || m["given_up"] != float64(n) {
		t.Fatalf("summary given_up %v fdr %v; want %d give-ups and an fdr object", m["given_up"], m["fdr"], n)
	}
	bytes, _ := f["bytes"].(float64)
	suggested, _ := f["suggested_capacity_bytes"].(float64)
	if f["records"] != float64(n) || bytes <= fdr.MinCapacity || f["capacity_bytes"] != float64(fdr.MinCapacity) ||
		f["ring_too_small"] != true || suggested < 2*bytes || f["path"] != r.cfg.FDRPath {
		t.Errorf("fdr %v; want %d records, more bytes than the %d-byte ring, ring_too_small, a capacity that holds them twice", f, n, fdr.MinCapacity)
	}

	res = r.run(func(o *Options) { o.FlightID = "F2" }, budget1...)
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3\n%s", res.code, res.err, res.stderr)
	}
	for _, want := range []string{"flight data recorder too small", fmt.Sprintf("wrote %d give-up records", n),
		fmt.Sprintf("holds %d bytes", fdr.MinCapacity), "set fdr_capacity_bytes to", "move the old ring file aside"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("text summary lacks %q:\n%s", want, res.stdout)
		}
	}
}

func TestARunWhoseGiveUpsFitTheFDRRingSuggestsNothing(t *testing.T) {
	s := fdrSummary("/x/fdr.ring", fdr.DefaultCapacity, 3, 900)
	if s.RingTooSmall || s.SuggestedCapacityBytes != nil || s.Records != 3 {
		t.Errorf("%+v, want not too small and no suggestion", s)
	}
	s = fdrSummary("/x/fdr.ring", fdr.DefaultCapacity, 150_000, 42_000_000)
	if !s.RingTooSmall || s.SuggestedCapacityBytes == nil || *s.SuggestedCapacityBytes != 128<<20 {
		t.Errorf("%+v, want too small with 134217728 (the power of two above twice 42 MB)", s)
	}
	s = fdrSummary("/x/fdr.ring", fdr.DefaultCapacity, 1, 900<<20)
	if *s.SuggestedCapacityBytes != fdr.MaxCapacity {
		t.Errorf("suggested %d, want the largest ring, %d", *s.SuggestedCapacityBytes, fdr.MaxCapacity)
	}
}

func TestDeadlineIsKeptWhileAnotherProcessHoldsTheFDRLock(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", tilestore.FlightOnGround, 3)
	ring, err := fdr.Open(context.Background(), r.cfg.FDRPath, fdr.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ring.Close()
	// Another process's writer: the ring's flock through a file
	// description of its own.
	release := fdrtest.HoldLock(t, r.cfg.FDRPath)

	done := make(chan runResult, 1)
	start := time.Now()
	go func() {
		done <- r.run(nil, "--deadline", "500ms")
	}()
	select {
	case res := <-done:
		took := time.Since(start)
		if took > 3*time.Second {
			t.Errorf("--deadline 500ms run ended after %s", took)
		}
		if res.code == exitcode.OK || !strings.Contains(res.stderr+fmt.Sprint(res.err), "flight data recorder") {
			t.Errorf("exit %d, err %v; want a failure naming the flight data recorder\n%s", res.code, res.err, res.stderr)
		}
	case <-time.After(15 * time.Second):
		release() // let the run go on
		<-done
		t.Fatal("a --deadline 500ms run was still waiting for the FDR lock after 15s")
	}
}
