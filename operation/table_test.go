package operation_test

import (
	"context"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/operation/operationtest"
)

// TestDefaultTableAdmitsIDsFromSkewedClocks: by default an ID's embedded
// time is not trusted, so a client whose clock is years behind can still
// upload; UUIDv7IssuedAt opts in to recognising old IDs.
func TestDefaultTableAdmitsIDsFromSkewedClocks(t *testing.T) {
	ctx := context.Background()
	old := operationtest.UUIDv7At(time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC))
	r := operation.Request{OpID: old, Method: "m", Fingerprint: "f"}

	def := operation.NewTable(operation.NewMemoryStore(), operation.TableOptions{})
	if tk, err := def.Begin(ctx, r); err != nil || !tk.Owner() {
		t.Fatalf("default table: %v, want owner", err)
	}
	strict := operation.NewTable(operation.NewMemoryStore(), operation.TableOptions{IssuedAt: operation.UUIDv7IssuedAt})
	if _, err := strict.Begin(ctx, r); err != operation.ErrExpired {
		t.Fatalf("UUIDv7IssuedAt table: %v, want ErrExpired", err)
	}
	if at, ok := operation.UUIDv7IssuedAt(operation.NewID()); !ok || time.Since(at) > time.Minute {
		t.Fatalf("NewID time %v %v", at, ok)
	}
	if _, ok := operation.UUIDv7IssuedAt("not-a-uuid-at-all"); ok {
		t.Fatal("a non-UUID was recognised")
	}
}

// TestCollectEveryRunsGCOnEachTick: retry.gc.ttl, driven by a ticker.
func TestCollectEveryRunsGCOnEachTick(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clock := operationtest.NewClock()
	table := operation.NewTable(operation.NewMemoryStore(), operation.TableOptions{Retention: time.Hour, GCMargin: time.Hour, Now: clock.Now})
	tk, err := table.Begin(ctx, operation.Request{OpID: "op-collect-00001", Method: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Seal(ctx, operation.Outcome{Status: 200}); err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	counts := make(chan int)
	done := make(chan struct{})
	go func() {
		table.CollectEvery(ctx, tick, func(n int, err error) {
			if err != nil {
				t.Error(err)
			}
			counts <- n
		})
		close(done)
	}()
	tick <- time.Time{}
	if n := <-counts; n != 0 {
		t.Fatalf("collected %d records inside the window", n)
	}
	clock.Advance(2*time.Hour + time.Second)
	tick <- time.Time{}
	if n := <-counts; n != 1 {
		t.Fatalf("collected %d records past retention+margin, want 1", n)
	}
	cancel()
	<-done
}
