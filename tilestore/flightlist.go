package tilestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FlightOverview is one flight as `tilectl flights list` shows it.
type FlightOverview struct {
	FlightID   string
	State      FlightState
	RecordedAt time.Time // flights.created_at: when the flight was first recorded
	ByStatus   map[VotingStatus]int64
	// CacheBytes is the sum of size_bytes of the flight's tiles whose blob
	// is in the cache: every recorded tile's (tiles import writes the blob
	// before it records the tile) but those flights prune freed.
	CacheBytes int64
	// LastRun is the flight's newest upload run (by start), nil when no
	// run has started on it.
	LastRun *UploadRun
}

// flightOverviewSQL is one statement, so every number comes from one
// snapshot. The per-status counts and byte sums read the tiles heap once
// (size_bytes is not in any index: carrying it in the status index would
// make that index, which every settlement writes, several times larger);
// at a million tiles that is a sequential read of the table, acceptable
// for an operator's overview and never on the upload path. Each flight's
// last run is one probe of upload_runs_flight_started (LIMIT 1 on its
// order), whatever the length of the run history.
const flightOverviewSQL = `
SELECT f.flight_id, f.state, f.created_at, t.voting_status, coalesce(t.n, 0), coalesce(t.bytes, 0),
       r.run_id, r.host, r.pid, r.started_at, r.finished_at, r.outcome, r.exit_code
  FROM flights f
  LEFT JOIN LATERAL (SELECT u.run_id, u.host, u.pid, u.started_at, u.finished_at, u.outcome, u.exit_code
                       FROM upload_runs u
                      WHERE u.flight_id = f.flight_id
                      ORDER BY u.started_at DESC, u.id DESC
                      LIMIT 1) r ON true
  LEFT JOIN (SELECT flight_id, voting_status, count(*) AS n,
                    coalesce(sum(size_bytes) FILTER (WHERE blob_pruned_at IS NULL), 0)::bigint AS bytes
               FROM tiles
              GROUP BY flight_id, voting_status) t ON t.flight_id = f.flight_id
 ORDER BY f.flight_id, t.voting_status`

// FlightOverviews returns every flight, ordered by flight ID, with its
// tiles by status (every status present, zero when none), the bytes its
// tiles' blobs take in the cache, and its last upload run.
func (s *Store) FlightOverviews(ctx context.Context) ([]FlightOverview, error) {
	rows, err := s.pool.Query(ctx, flightOverviewSQL)
	if err != nil {
		return nil, fmt.Errorf("list flights: %w", err)
	}
	var out []FlightOverview
	var (
		id, state string
		recorded  time.Time
		status    *string
		n, bytes  int64
		runID     *string
		host      *string
		pid       *int
		started   *time.Time
		run       UploadRun
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &recorded, &status, &n, &bytes,
		&runID, &host, &pid, &started, &run.FinishedAt, &run.Outcome, &run.ExitCode}, func() error {
		if len(out) == 0 || out[len(out)-1].FlightID != id {
			fo := FlightOverview{FlightID: id, State: FlightState(state), RecordedAt: recorded,
				ByStatus: zeroCounts()}
			if runID != nil {
				// Copies: the scan targets are reused for the next row.
				lr := UploadRun{RunID: *runID, FlightID: id, Host: *host, PID: *pid, StartedAt: *started,
					FinishedAt: clone(run.FinishedAt), Outcome: clone(run.Outcome), ExitCode: clone(run.ExitCode)}
				fo.LastRun = &lr
			}
			out = append(out, fo)
		}
		if status != nil {
			last := &out[len(out)-1]
			last.ByStatus[VotingStatus(*status)] = n
			last.CacheBytes += bytes
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list flights: %w", err)
	}
	return out, nil
}

func clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// FlightFootprint estimates the space the blobs of the flight's recorded
// tiles take on a filesystem of block-byte blocks: each size rounded up to
// whole blocks.
func (s *Store) FlightFootprint(ctx context.Context, flightID string, block int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum((size_bytes + $2 - 1) / $2 * $2), 0)::bigint FROM tiles
		WHERE flight_id = $1`, flightID, max(block, 1)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("size the recorded tiles of flight %s: %w", flightID, err)
	}
	return n, nil
}
