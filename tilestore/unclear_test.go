package tilestore_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/tilestore"
)

// A claim leaves out the tiles rejected with ReasonProtocolError, reading
// those rejections on every claim. Its statement runs on a generic plan
// (claimTx), which reads them through upload_rejections_unclear_idx only
// if the SQL names the index's reason itself, not as a value: else each
// claim would read every rejection ever recorded.
func TestTheClaimsGenericPlanReadsUnclearRejectionsThroughTheirIndex(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FU", 20)
	reject(t, s, "op-1", "bad_tile", ids[:10]...)
	reject(t, s, "op-2", tilestore.ReasonProtocolError, ids[10])
	for _, order := range []tilestore.Order{tilestore.OrderZoom, tilestore.OrderID} {
		err := func() error {
			conn, err := s.Pool().Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: tilestore.ClaimTxBegin})
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			// On this small table a scan of it would do; what matters is
			// that the index can serve the condition at all.
			for _, set := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", "SET LOCAL enable_seqscan = off"} {
				if _, err := tx.Exec(ctx, set); err != nil {
					return err
				}
			}
			name := "unclear_" + string(order)
			if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+tilestore.ClaimMarkSQL(order), pgx.QueryExecModeSimpleProtocol); err != nil {
				return err
			}
			args := "'FU', 64, 5, '{}'::text[], '{}'::text[], now(), '', 'op-u'"
			if order == tilestore.OrderZoom {
				args += ", -1"
			}
			plan, err := explain(ctx, tx, "EXECUTE "+name+"("+args+")", pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				return err
			}
			if !strings.Contains(plan, "upload_rejections_unclear_idx") || strings.Contains(plan, "Seq Scan on upload_rejections") {
				t.Errorf("order %s: the claim's generic plan does not read unclear rejections through upload_rejections_unclear_idx:\n%s",
					order, plan)
			}
			return nil
		}()
		if err != nil {
			t.Fatal(err)
		}
	}
}
