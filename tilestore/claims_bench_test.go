package tilestore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// BenchmarkClaimBatch: 8 runs claim and settle 20-tile batches of one
// 100,000-tile flight at once against local Postgres. A cycle is a claim
// (SELECT ... FOR UPDATE SKIP LOCKED, journal insert, member marks, durable
// commit) and its settlement (members uploaded, batch settled): claims/s is
// the database's side of how many batches a fleet can move per second.
func BenchmarkClaimBatch(b *testing.B) {
	s := newStore(b)
	const tiles, runs, size = 100_000, 8, 20
	seedFlight(b, s, "CB", tiles)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var seq atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var claimed atomic.Int64
	var wg sync.WaitGroup
	per := (b.N + runs - 1) / runs
	for r := range runs {
		st := s.ForRun(tilestore.Run{ID: fmt.Sprintf("bench-%d", r), Lease: time.Minute})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				op := fmt.Sprintf("op-%d", seq.Add(1))
				c, err := st.ClaimBatch(ctx, tilestore.Claim{FlightID: "CB", Limit: size, MaxAttempts: 5, OpID: op, Pick: pickAll(op)})
				if err != nil {
					b.Error(err)
					return
				}
				if c.Candidates == 0 {
					return // the flight is used up
				}
				if err := st.SettleBatch(ctx, tilestore.Settlement{OpID: c.Batch.OpID, Uploaded: c.Batch.TileIDs, HTTPStatus: 200}); err != nil {
					b.Error(err)
					return
				}
				claimed.Add(1)
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(claimed.Load())/time.Since(start).Seconds(), "claims/s")
}
