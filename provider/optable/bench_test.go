package optable_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/tilectl/tilectl/provider/optable"
)

var benchOutcome = optable.Outcome{Status: 200, Body: []byte(`{"op_id":"x","results":[]}`)}

func benchAdmitSeal(b *testing.B, store optable.Store, clients int, pol optable.Policy) {
	table := optable.NewTable(store, optable.TableOptions{})
	ctx := context.Background()
	var worker atomic.Int64
	if clients > 0 {
		b.SetParallelism((clients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		prefix := "bench-" + strconv.FormatInt(worker.Add(1), 10) + "-"
		buf := make([]byte, 0, 64)
		for i := 0; pb.Next(); i++ {
			buf = strconv.AppendInt(append(buf[:0], prefix...), int64(i), 10)
			tk, err := table.Begin(ctx, optable.Request{Scope: "s", OpID: string(buf), Method: "m", Fingerprint: "f", Policy: pol})
			if err != nil || !tk.Owner() {
				b.Fatalf("begin: %v", err)
			}
			if _, err := tk.Seal(ctx, benchOutcome); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkMemoryAdmitSeal: admit + seal of new IDs on the in-memory store.
func BenchmarkMemoryAdmitSeal(b *testing.B) {
	benchAdmitSeal(b, optable.NewMemoryStore(), 0, optable.Policy{})
}

// BenchmarkMemoryReplay: a duplicate of a sealed operation.
func BenchmarkMemoryReplay(b *testing.B) {
	table := optable.NewTable(optable.NewMemoryStore(), optable.TableOptions{})
	ctx := context.Background()
	r := optable.Request{Scope: "s", OpID: "bench-replay-0001", Method: "m", Fingerprint: "f"}
	tk, _ := table.Begin(ctx, r)
	if _, err := tk.Seal(ctx, benchOutcome); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, err := table.Begin(ctx, r)
			if err != nil || tk.Owner() || len(tk.Outcome().Body) == 0 {
				b.Fatal("not a replay")
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkPGAdmitSeal: admit + seal on Postgres from 8 concurrent
// clients, every write a synchronous commit (persist idem: the policy of a
// tile batch).
func BenchmarkPGAdmitSeal(b *testing.B) {
	pool := newPGPool(b)
	benchAdmitSeal(b, optable.NewPGStore(pool), 8, optable.Policy{Persist: true, Idem: true})
}

// BenchmarkPGBaselineCommit is the reference for BenchmarkPGAdmitSeal: one
// single-row INSERT per synchronous commit from 8 clients, the server's
// commit rate. An admit+seal is two such commits.
func BenchmarkPGBaselineCommit(b *testing.B) {
	pool := newPGPool(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE bench_commit (id BIGINT PRIMARY KEY)"); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism((8 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := pool.Exec(ctx, "INSERT INTO bench_commit VALUES ($1)", next.Add(1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}
