package fdr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// stepClock returns a clock that advances one millisecond per call.
func stepClock() func() time.Time {
	var mu sync.Mutex
	t := t0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Millisecond)
		return t
	}
}

func openRing(t *testing.T, capacity int64) (*Recorder, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sub", "fdr.ring")
	r, err := Open(context.Background(), path, Options{Capacity: capacity, Now: stepClock()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, path
}

func appendN(t *testing.T, r *Recorder, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := r.Append(context.Background(), Entry{Kind: "test.event", Payload: map[string]int{"i": i}}); err != nil {
			t.Fatal(err)
		}
	}
}

func payloadI(t *testing.T, rec Record) int {
	t.Helper()
	var p struct{ I int }
	if err := json.Unmarshal(rec.Payload, &p); err != nil {
		t.Fatalf("payload %s: %v", rec.Payload, err)
	}
	return p.I
}

func TestAppendThenReadRoundTrips(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, 0)
	type giveUp struct {
		TileID     string `json:"tile_id"`
		FlightID   string `json:"flight_id"`
		Attempts   int    `json:"attempts"`
		LastReason string `json:"last_rejection_reason"`
	}
	want := []Entry{
		{Kind: "upload.giveup", Key: "giveup/f1-17-1-1/5", Payload: giveUp{"f1-17-1-1", "f1", 5, "checksum_mismatch"}, Durable: true},
		{Kind: "note", Payload: "ünïcødé"},
		{Kind: "note", Payload: nil},
		{Kind: "raw", Payload: json.RawMessage(`{"a": [1, 2]}`)},
	}
	var got []Record
	for _, e := range want {
		rec, err := r.Append(context.Background(), e)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rec)
	}
	recs, rep, err := ReadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(want) || rep.Skipped != 0 || len(rep.Gaps) != 0 || rep.Wrapped || rep.NextSeq != 5 {
		t.Fatalf("read %d records, report %+v", len(recs), rep)
	}
	for i, rec := range recs {
		if rec.Seq != uint64(i+1) || rec.Kind != want[i].Kind || rec.Key != want[i].Key || !rec.Time.Equal(got[i].Time) ||
			string(rec.Payload) != string(got[i].Payload) || !rec.Time.After(t0) {
			t.Errorf("record %d = %+v, appended %+v", i, rec, got[i])
		}
	}
	if string(recs[0].Payload) != `{"tile_id":"f1-17-1-1","flight_id":"f1","attempts":5,"last_rejection_reason":"checksum_mismatch"}` {
		t.Errorf("give-up payload = %s", recs[0].Payload)
	}
	if string(recs[3].Payload) != `{"a":[1,2]}` {
		t.Errorf("raw payload = %s", recs[3].Payload)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != HeaderSize+DefaultCapacity {
		t.Errorf("file mode %v size %d err %v", st.Mode(), st.Size(), err)
	}
	if dst, err := os.Stat(filepath.Dir(path)); err != nil || dst.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v err %v", dst.Mode(), err)
	}
}

func TestWrapAroundKeepsOnlyTheNewestInOrder(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	const n = 5000 // ~50 bytes each: several laps of 64 KiB
	appendN(t, r, 1, n)
	recs, rep, err := ReadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Wrapped || rep.Skipped != 0 || len(rep.Gaps) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if len(recs) < 100 || len(recs) >= n {
		t.Fatalf("kept %d of %d records", len(recs), n)
	}
	if last := recs[len(recs)-1]; last.Seq != n || payloadI(t, last) != n {
		t.Fatalf("newest = %+v, want seq %d", last, n)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Seq != recs[i-1].Seq+1 {
			t.Fatalf("records %d,%d: seq %d then %d", i-1, i, recs[i-1].Seq, recs[i].Seq)
		}
	}
	st, _ := os.Stat(path)
	if st.Size() != HeaderSize+MinCapacity {
		t.Fatalf("file grew to %d", st.Size())
	}
}

func TestCapacityIsFixedAtCreation(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	appendN(t, r, 1, 3)
	r.Close()
	var logged []string
	r2, err := Open(context.Background(), path, Options{Capacity: 8 << 20, Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if r2.Capacity() != MinCapacity {
		t.Fatalf("capacity %d after reopening with 8 MiB, want the file's %d", r2.Capacity(), MinCapacity)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "65536") {
		t.Fatalf("logged %q, want one capacity notice", logged)
	}
	rec, err := r2.Append(context.Background(), Entry{Kind: "k"})
	if err != nil || rec.Seq != 4 {
		t.Fatalf("append after reopen = %+v, %v; want seq 4", rec, err)
	}
	if _, err := Open(context.Background(), path+"x", Options{Capacity: 1000}); err == nil {
		t.Fatal("capacity below the minimum accepted")
	}
}

func TestAppendRejectsBadEntries(t *testing.T) {
	t.Parallel()
	r, _ := openRing(t, MinCapacity)
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		e    Entry
	}{
		{"empty kind", ctx, Entry{}},
		{"NUL in key", ctx, Entry{Kind: "k", Key: "a\x00b"}},
		{"invalid UTF-8 kind", ctx, Entry{Kind: "\xff"}},
		{"long kind", ctx, Entry{Kind: strings.Repeat("k", 256)}},
		{"unmarshalable payload", ctx, Entry{Kind: "k", Payload: func() {}}},
		{"too large", ctx, Entry{Kind: "k", Payload: strings.Repeat("x", MinCapacity/4)}},
		{"cancelled", cancelled, Entry{Kind: "k"}},
	}
	for _, tt := range tests {
		if rec, err := r.Append(tt.ctx, tt.e); err == nil {
			t.Errorf("%s: appended %+v", tt.name, rec)
		}
	}
	r.Close()
	if _, err := r.Append(ctx, Entry{Kind: "k"}); err != ErrClosed {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

func TestConcurrentAppendsInOneProcess(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, 0)
	other, err := Open(context.Background(), path, Options{}) // a second Recorder: separate fd, same flock
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := r
			if g%2 == 1 {
				rec = other
			}
			for i := 0; i < each; i++ {
				key := ""
				if i%50 == 0 {
					key = fmt.Sprintf("shared/%d", i) // every goroutine races for these
				}
				if _, err := rec.Append(context.Background(), Entry{Kind: "c", Key: key, Payload: []int{g, i}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	recs, rep, err := ReadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	// 4 shared keys written once each instead of 8 times.
	want := goroutines*each - 4*(goroutines-1)
	checkConsecutive(t, recs, rep, want)
}

func checkConsecutive(t *testing.T, recs []Record, rep ReadReport, want int) {
	t.Helper()
	if len(recs) != want || rep.Skipped != 0 || len(rep.Gaps) != 0 {
		t.Fatalf("%d records (want %d), report %+v", len(recs), want, rep)
	}
	keys := map[string]int{}
	for i, rec := range recs {
		if rec.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, rec.Seq)
		}
		if rec.Key != "" {
			keys[rec.Key]++
			if keys[rec.Key] > 1 {
				t.Fatalf("key %q written twice", rec.Key)
			}
		}
	}
}

func TestDurableAppendSyncsBeforeReturning(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, 0)
	syncs := 0
	r.sync = func(f *os.File) error { syncs++; return syncData(f) }
	if _, err := r.Append(context.Background(), Entry{Kind: "chatter"}); err != nil || syncs != 0 {
		t.Fatalf("non-durable append: err %v, %d syncs, want 0", err, syncs)
	}
	rec, err := r.Append(context.Background(), Entry{Kind: "upload.giveup", Key: "giveup/x/1", Durable: true, Payload: map[string]int{"attempts": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if syncs != 1 {
		t.Fatalf("durable append made %d syncs, want 1", syncs)
	}
	recs, _, err := ReadFile(context.Background(), path)
	if err != nil || len(recs) != 2 || recs[1].Seq != rec.Seq {
		t.Fatalf("read %+v, %v", recs, err)
	}
	r.sync = func(*os.File) error { return os.ErrInvalid }
	if _, err := r.Append(context.Background(), Entry{Kind: "upload.giveup", Durable: true}); err == nil {
		t.Fatal("a failed sync was not reported")
	}
}

func TestAppendToAFileTruncatedUnderneathFailsInsteadOfCrashing(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	appendN(t, r, 1, 2)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Append(context.Background(), Entry{Kind: "k"}); !errors.Is(err, ErrFileShrunk) {
		t.Fatalf("append after truncation: %v, want ErrFileShrunk", err)
	}
	// A fresh Recorder starts the ring again.
	r2, err := Open(context.Background(), path, Options{Capacity: MinCapacity})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if rec, err := r2.Append(context.Background(), Entry{Kind: "k"}); err != nil || rec.Seq != 1 {
		t.Fatalf("append on the recreated ring = %+v, %v", rec, err)
	}
}
