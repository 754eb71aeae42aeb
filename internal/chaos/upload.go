package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Exit codes of tilectl upload-pending.
const (
	exitOK          = 0
	exitPartial     = 3
	exitNotOnGround = 4
)

// runLease is each run's --lease: a killed run's batches wait this long
// for the next run (short, so rounds stay short).
const runLease = time.Second

// runDeadline is each upload-pending run's --deadline; a run still going
// well past it counts as hung.
const runDeadline = 20 * time.Second

// tileBudget is each run's --max-per-tile-attempts.
const tileBudget = 3

// uploadUntilSettled runs upload-pending, SIGKILLing some runs at seeded
// random moments and breaking the database connections of others, until a
// run ends 0 or 3 with nothing pending but the damaged tiles (their blobs
// are bad: they stay pending until a person re-imports them) and no open
// batch. With a clientID the runs send it (--client-id, one batch in
// flight), and after each one tilectl's sequence must not be ahead of the
// provider's.
func (s *soak) uploadUntilSettled(ctx context.Context, flight, clientID string, damaged int) error {
	env := append(append([]string(nil), s.env...), "TILECTL_PROVIDER_URL="+s.prov.base)
	concurrency := "2"
	if clientID != "" {
		concurrency = "1"
	}
	args := []string{"upload-pending", "--flight", flight, "-o", "json",
		"--batch-size", "6", "--concurrency", concurrency,
		"--backoff-base", "10ms", "--backoff-cap", "50ms",
		"--max-per-tile-attempts", fmt.Sprint(tileBudget),
		"--lease", runLease.String(),
		"--deadline", runDeadline.String()}
	if clientID != "" {
		args = append(args, "--client-id", clientID)
	}
	maxRuns := s.cfg.MaxRunsPerRound
	// Each round lands 1-3 kills first: runs are killed until that many
	// died mid-run (a run that finished before its kill time does not
	// count). Later runs in the first half of the budget are killed
	// sometimes; none in the second half, so every round converges.
	wantKills, landed := 1+s.rng.IntN(3), 0
	// Likewise each round arms one database restart and one provider
	// crash in its runs until each has landed mid-run, and more now and
	// then in the first half.
	dbLanded, provLanded := 0, 0
	hooks := runHooks{breakConns: s.dbs.breakClientConnections, restartDB: s.restartDB, killProvider: s.crashProvider}
	for run := 1; ; run++ {
		if run > maxRuns {
			s.chk.check("round-settles-within-max-runs", false,
				"flight %s still had work after %d upload-pending runs", flight, maxRuns)
			return nil
		}
		plan := runPlan{hardLimit: runDeadline + 15*time.Second}
		// Draw every choice each run, used or not, so the sequence of
		// draws does not depend on what earlier runs did.
		killRoll, killFrac := s.rng.Float64(), s.rng.Float64()
		breakRoll, breakAt := s.rng.Float64(), time.Duration(20+s.rng.IntN(400))*time.Millisecond
		dbRoll, dbFrac := s.rng.Float64(), s.rng.Float64()
		provRoll, provFrac := s.rng.Float64(), s.rng.Float64()
		// Armed early in the run (within 200 ms, or anywhere now and
		// then once one has landed); the hook then waits for a batch to
		// be executing at the provider before it strikes.
		if run <= maxRuns/2 && (dbLanded == 0 || dbRoll < 0.1) {
			plan.dbRestartAfter = 5*time.Millisecond + time.Duration(dbFrac*float64(200*time.Millisecond))
		}
		if run <= maxRuns/2 && (provLanded == 0 || provRoll < 0.1) {
			plan.providerKillAfter = 5*time.Millisecond + time.Duration(provFrac*float64(200*time.Millisecond))
		}
		if run <= maxRuns/2 && (landed < wantKills || killRoll < 0.25) {
			// A random moment within the longest whole run so far, so
			// kills fall anywhere in a run; one that comes too late
			// does not count and the next run is killed instead.
			plan.killAfter = 5*time.Millisecond + time.Duration(killFrac*float64(s.runTime))
		}
		if breakRoll < 0.15 {
			plan.breakAfter = breakAt
		}
		if s.rep.DBBreaks == 0 {
			// Until one break has landed, keep trying every 20 ms of
			// every run: a fast run may otherwise end before its
			// break time comes.
			plan.breakAfter, plan.breakUntilHit = min(breakAt, 50*time.Millisecond), true
		}
		res, err := runTilectl(ctx, s.cfg.TilectlBin, env, args, plan, hooks)
		if err != nil {
			return err
		}
		select {
		case <-s.prov.done:
			return fmt.Errorf("the provider exited during the round (%v):\n%s", s.prov.err, tail(s.prov.stderr.Bytes(), 2000))
		default:
		}
		s.rep.Runs++
		s.rep.DBBreaks += res.breaks
		s.rep.DBRestarts += res.dbRestarts
		s.rep.ProviderKills += res.providerKills
		s.rep.DBRestartsMidBatch += res.dbRestartsMidBatch
		s.rep.ProviderKillsMidBatch += res.killsMidBatch
		dbLanded += res.dbRestarts
		provLanded += res.providerKills
		if res.killed {
			s.rep.Kills++
			landed++
		} else {
			s.rep.ExitCodes[res.exit]++
			if res.exit == exitOK || res.exit == exitPartial {
				s.runTime = max(s.runTime, res.took)
			}
		}
		fmt.Fprintf(s.cfg.Log, "  run %2d: exit %3d killed=%-5v breaks=%d db-restarts=%d provider-kills=%d %v\n",
			run, res.exit, res.killed, res.breaks, res.dbRestarts, res.providerKills, res.took.Round(time.Millisecond))
		s.chk.check("run-ends-by-its-deadline", !res.hung, "an upload-pending run of %s was still going %v after start", flight, plan.hardLimit)
		if clientID != "" {
			if err := s.checkSequenceNotAhead(ctx, flight, clientID); err != nil {
				return err
			}
		}
		if res.killed {
			continue
		}
		s.chk.check("flight-seen-on-ground", res.exit != exitNotOnGround, "upload-pending said %s is not on ground: %s", flight, tail(res.stderr, 500))
		if res.exit != exitOK && res.exit != exitPartial {
			fmt.Fprintf(s.cfg.Log, "          %s\n", lastLine(res.stderr))
			continue
		}
		var report struct {
			FlightID string `json:"flight_id"`
			Outcome  string `json:"outcome"`
			Flights  []struct {
				HeldUntil *time.Time `json:"held_until"`
			} `json:"flights"`
		}
		err = json.Unmarshal(res.stdout, &report)
		s.chk.check("json-output-parses", err == nil && report.Outcome != "",
			"upload-pending -o json (exit %d) printed %q: %v", res.exit, tail(res.stdout, 300), err)
		left, err := s.workLeft(ctx, flight)
		if err != nil {
			return err
		}
		if left <= damaged {
			// Both faults are armed in every round, but a round whose
			// work is done before one lands cannot take it mid-run any
			// more: the table counts the rounds each landed in, and the
			// soak as a whole must have both (chaos.go).
			if dbLanded > 0 {
				s.rep.RoundsWithDBRestart++
			}
			if provLanded > 0 {
				s.rep.RoundsWithProviderCrash++
			}
			return nil
		}
		// A killed run's batches stay its own until their lease ends; the
		// run said until when.
		for _, f := range report.Flights {
			if f.HeldUntil != nil {
				time.Sleep(time.Until(*f.HeldUntil) + 50*time.Millisecond)
			}
		}
	}
}

// workLeft counts the flight's uploadable tiles and open batches.
func (s *soak) workLeft(ctx context.Context, flight string) (int, error) {
	conn, err := pgx.Connect(ctx, s.dbs.url(s.dbs.client, "tilechaos_checker"))
	if err != nil {
		return 0, fmt.Errorf("read tilectl's database: %w", err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM tiles WHERE flight_id = $1 AND voting_status IN ('pending', 'trusted')) +
		(SELECT count(*) FROM upload_batches WHERE flight_id = $1 AND state = 'open')`, flight).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count work left for flight %s: %w", flight, err)
	}
	return n, nil
}

// lastLine is the last non-empty line of b, clipped, for progress output.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	l := lines[len(lines)-1]
	if len(l) > 300 {
		l = l[:300] + "..."
	}
	return l
}
