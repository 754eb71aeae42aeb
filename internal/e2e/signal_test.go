package e2e

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/provider"
)

func TestSignalsSettleInFlightBatchesAndExitWithTheShellCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{})
			var once sync.Once
			// Every batch takes a while, so the signal lands while one is
			// on the wire.
			prov := refProvider(t, provider.FaultConfig{Latency: 300 * time.Millisecond},
				func(string) { once.Do(func() { close(started) }) })
			s := newSite(t, prov.URL)
			s.flight("sig1", 12)
			cmd := s.command("upload-pending", "--flight", "sig1", "--batch-size", "2", "--concurrency", "1")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("no batch reached the provider")
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("tilectl did not stop after the signal")
			}
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", got, tc.code, stderr.String())
			}
			var open, uploaded, pending int
			s.query(func(conn *pgx.Conn) error {
				return conn.QueryRow(context.Background(), `SELECT
					(SELECT count(*) FROM upload_batches WHERE state = 'open'),
					(SELECT count(*) FROM tiles WHERE flight_id = 'sig1' AND voting_status = 'uploaded'),
					(SELECT count(*) FROM tiles WHERE flight_id = 'sig1' AND voting_status IN ('pending', 'trusted'))`).
					Scan(&open, &uploaded, &pending)
			})
			if open != 0 || uploaded == 0 {
				t.Fatalf("%d batches left open, %d tiles uploaded: the batch on the wire was not settled", open, uploaded)
			}
			// The run history records the interrupted run's end.
			var outcome string
			var exit, rowPending int
			s.query(func(conn *pgx.Conn) error {
				return conn.QueryRow(context.Background(), `SELECT outcome, exit_code, pending FROM upload_runs
					WHERE flight_id = 'sig1' AND finished_at IS NOT NULL`).Scan(&outcome, &exit, &rowPending)
			})
			if outcome != "interrupted" || exit != tc.code || rowPending != pending {
				t.Fatalf("run history: outcome %q exit %d pending %d, want interrupted %d %d", outcome, exit, rowPending, tc.code, pending)
			}
			want := "interrupted: " + itoa(pending) + " tiles pending; run again to continue"
			if !strings.Contains(stderr.String(), want) {
				t.Fatalf("stderr lacks %q:\n%s", want, stderr.String())
			}
		})
	}
}
