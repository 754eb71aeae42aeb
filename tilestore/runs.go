package tilestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// UploadRun is one upload-pending run's row for one flight in the run
// history (table upload_runs). A run that has not ended (still running,
// or killed before it could write its end) has FinishedAt nil; so are
// Outcome, ExitCode, the counts and Error until the end is written: a
// number that is not known stays nil, never 0.
type UploadRun struct {
	RunID      string // Run.ID: the same for every flight of one run and on its batch claims
	FlightID   string
	Host       string
	PID        int
	Version    string
	StartedAt  time.Time
	FinishedAt *time.Time
	Outcome    *string
	ExitCode   *int
	Accepted   *int
	Duplicate  *int
	Rejected   *int // rejection events
	GivenUp    *int
	Pending    *int // tiles still pending after the run
	Bytes      *int64
	Error      *string
}

// StartRun records that run r.RunID started uploading flight r.FlightID
// (its end fields are ignored).
func (s *Store) StartRun(ctx context.Context, r UploadRun) error {
	_, err := s.pool.Exec(ctx, `
INSERT INTO upload_runs (run_id, flight_id, host, pid, version, started_at)
VALUES ($1, $2, $3, $4, $5, $6)`, r.RunID, r.FlightID, r.Host, r.PID, r.Version, r.StartedAt)
	if err != nil {
		return fmt.Errorf("record the start of run %s on flight %q: %w", r.RunID, r.FlightID, err)
	}
	return nil
}

// FinishRun writes the end of run r.RunID on flight r.FlightID: FinishedAt
// (required), the outcome, exit code, counts and error. A row StartRun did
// not write is an error.
func (s *Store) FinishRun(ctx context.Context, r UploadRun) error {
	if r.FinishedAt == nil {
		return fmt.Errorf("finish run %s on flight %q: no end time", r.RunID, r.FlightID)
	}
	tag, err := s.pool.Exec(ctx, `
UPDATE upload_runs SET finished_at = $3, outcome = $4, exit_code = $5, accepted = $6, duplicate = $7,
       rejected = $8, given_up = $9, pending = $10, bytes = $11, error = $12
 WHERE run_id = $1 AND flight_id = $2`,
		r.RunID, r.FlightID, *r.FinishedAt, r.Outcome, r.ExitCode, r.Accepted, r.Duplicate,
		r.Rejected, r.GivenUp, r.Pending, r.Bytes, r.Error)
	if err != nil {
		return fmt.Errorf("record the end of run %s on flight %q: %w", r.RunID, r.FlightID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("record the end of run %s on flight %q: its start was never recorded", r.RunID, r.FlightID)
	}
	return nil
}

// Runs returns, for flight flightID ("" for every flight), its last limit
// runs, newest first, and how many runs each flight has in all.
func (s *Store) Runs(ctx context.Context, flightID string, limit int) ([]UploadRun, map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `
SELECT run_id, flight_id, host, pid, version, started_at, finished_at, outcome, exit_code,
       accepted, duplicate, rejected, given_up, pending, bytes, error, total
  FROM (SELECT r.*, row_number() OVER w AS n, count(*) OVER (PARTITION BY flight_id) AS total
          FROM upload_runs r
         WHERE $1 = '' OR flight_id = $1
        WINDOW w AS (PARTITION BY flight_id ORDER BY started_at DESC, id DESC)) x
 WHERE n <= $2
 ORDER BY flight_id, started_at DESC, id DESC`, flightID, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("list the runs of flight %q: %w", flightID, err)
	}
	var out []UploadRun
	totals := map[string]int64{}
	var r UploadRun
	var total int64
	_, err = pgx.ForEachRow(rows, []any{&r.RunID, &r.FlightID, &r.Host, &r.PID, &r.Version, &r.StartedAt,
		&r.FinishedAt, &r.Outcome, &r.ExitCode, &r.Accepted, &r.Duplicate, &r.Rejected, &r.GivenUp,
		&r.Pending, &r.Bytes, &r.Error, &total}, func() error {
		out = append(out, r)
		totals[r.FlightID] = total
		r = UploadRun{}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list the runs of flight %q: %w", flightID, err)
	}
	return out, totals, nil
}
