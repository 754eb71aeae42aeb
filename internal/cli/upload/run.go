package upload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/bwlimit"
	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/metricsfile"
	"github.com/tilectl/tilectl/internal/sockmeter"
	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// GiveUpRecorder is the flight data recorder as this command uses it.
type GiveUpRecorder interface {
	retrydecorator.GiveUpRecorder
	Close() error
}

// run is one uploadRun's wiring, shared by its flights.
type run struct {
	opts      *Options
	cfg       config.Config
	retry     retrydecorator.Config
	decorate  bool
	log       zerolog.Logger
	store     *tilestore.Store
	inner     uploader.TileUploader
	rec       GiveUpRecorder
	metrics   *metricsfile.Metrics
	tty       bool
	newTicker func(time.Duration) (<-chan time.Time, func())
	progress  atomic.Pointer[progress] // the flight being uploaded, for breaker events
	history   []tilestore.UploadRun    // the run-history rows this run started
	reported  bool                     // the summary was printed
	locks     tilestore.RunLocks       // the machine's run locks (cache_dir/runs)
	lock      *tilestore.RunLock       // this run's, held for its whole life; nil in a dry run
	limiter   *bwlimit.Limiter         // the process's bandwidth limit, shared by every batch
	sent      *sentCounter             // the uploader's Pace: the limiter, counting body bytes
	// sockets follows the uploader's connections, for what of the bytes
	// handed to them is still in their send buffers; nil with a client
	// the caller gave (Options.HTTPClient).
	sockets *sockmeter.Meter
	// unstartedBudget bounds the counts of all the flights the run's end
	// kept from starting (unstarted), together; 0 is unstartedCountBudget.
	// unstartedBy is when it runs out, set by the first of them.
	unstartedBudget time.Duration
	unstartedBy     time.Time
}

// unstartedCountBudget is how long the counts of what the flights the
// run's end kept from starting leave may take, all of them together: a
// database that does not answer delays the exit by it once, not once per
// flight.
const unstartedCountBudget = 5 * time.Second

// uploadRun runs the command. Whatever ends it, -o json prints exactly one
// object: the summary, or the failure that came before there was one.
func uploadRun(ctx context.Context, opts *Options) error {
	r := &run{opts: opts}
	err := r.upload(ctx)
	if err != nil && !r.reported && opts.Output == "json" {
		return r.reportEarlyFailure(ctx, err)
	}
	return err
}

func (r *run) upload(ctx context.Context) error {
	opts := r.opts
	loaded, err := opts.Config()
	if err != nil {
		return err // the factory marks configuration errors as usage errors
	}
	cfg := *loaded
	r.cfg, r.retry, r.log, r.metrics = cfg, retryConfig(&cfg), opts.Logger(), metricsfile.New()
	r.decorate = !opts.NoRetry && !cfg.Upload.DisableRetryDecorator
	r.tty, r.newTicker = opts.IO.IsStderrTTY(), opts.NewTicker
	if opts.Quiet {
		r.log = r.log.Level(zerolog.ErrorLevel)
	}
	if r.newTicker == nil {
		r.newTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	if !r.decorate {
		r.log.Info().Bool("no_retry_flag", opts.NoRetry).
			Bool("config_disable_retry_decorator", cfg.Upload.DisableRetryDecorator).
			Msg("retry decorator bypassed: partial uploads are not retried and rejections are counted by the next retrying run")
	}

	if !opts.DryRun {
		if err := requireToken(&cfg); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.Upload.Deadline)
	defer cancel()
	if err := r.newLimiter(); err != nil {
		return exitcode.UsageError(err)
	}
	defer r.watchToggle(ctx)()
	if err := r.wire(ctx); err != nil {
		return err
	}
	defer r.releaseLock(ctx)
	if r.rec != nil {
		defer func() {
			if err := r.rec.Close(); err != nil {
				r.log.Error().Err(err).Msg("close flight data recorder")
			}
		}()
	}
	flights, err := r.flights(ctx)
	if err != nil {
		return err
	}
	r.log.Info().Strs("flights", flights).Bool("dry_run", opts.DryRun).Bool("retry_decorator", r.decorate).
		Dur("deadline", cfg.Upload.Deadline).Stringer("concurrency", cfg.Upload.Concurrency).
		Int("batch_size", cfg.Upload.BatchSize).Str("run_id", r.store.Run().ID).Str("host", r.store.Run().Host).
		Int("pid", r.store.Run().PID).Dur("lease", r.store.Run().Lease).Msg("upload-pending start")
	if r.decorate && !opts.DryRun {
		if err := r.logSchedule(); err != nil {
			return exitcode.UsageError(err)
		}
	}

	sum := Summary{DryRun: opts.DryRun, RetryDecorator: r.decorate, Counts: knownCounts(), Flights: []FlightSummary{}, LocalFailures: []LocalFailure{}}
	var firstErr error
	var fdrRecords int
	var fdrBytes int64
	for _, id := range flights {
		var fs FlightSummary
		var err error
		if ctx.Err() != nil {
			// The run's end (its deadline, an interruption) came before
			// this flight: none of it is sent, and it is still reported.
			fs, err = r.unstarted(ctx, id)
		} else {
			fs, err = r.flight(ctx, id)
		}
		if se := exitcode.Interruption(ctx); se != nil {
			// The run's error says it was interrupted: a failure beside
			// the interruption is said here and in the flight's error.
			if err = interruptedFlight(&fs, err, se); err != nil {
				r.log.Error().Err(err).Str("flight_id", id).Msg("the interrupted flight also failed")
			}
		}
		if err != nil {
			err = r.explain(err)
			msg := err.Error()
			fs.Error = &msg
		}
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("upload-pending deadline of %s reached (raise --deadline or upload.deadline): %w", cfg.Upload.Deadline, err)
			msg := err.Error()
			fs.Error = &msg
		}
		sum.Flights = append(sum.Flights, fs)
		sum.add(fs.Counts)
		sum.LocalFailures = append(sum.LocalFailures, fs.localFailures...)
		fdrRecords, fdrBytes = fdrRecords+fs.fdrRecords, fdrBytes+fs.fdrBytes
		if fs.NextRetryAt != nil && (sum.NextRetryAt == nil || fs.NextRetryAt.After(*sum.NextRetryAt)) {
			sum.NextRetryAt = fs.NextRetryAt
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if se := exitcode.Interruption(ctx); se != nil {
		// Every batch on the wire was let finish and settled; what is
		// left stays pending for the next run.
		msg := fmt.Sprintf("interrupted: %s tiles pending; run again to continue", countText(sum.StillPending))
		firstErr = exitcode.New(se.Code(), fmt.Errorf("%s (%s)", msg, se))
		sum.Interrupted = true
	}
	sum.Rate = runRate(sum.Flights)
	if sum.Rate != nil && !opts.DryRun {
		r.metrics.SetRate(*sum.Rate)
	}
	if r.rec != nil {
		sum.FDR = fdrSummary(r.cfg.FDRPath, r.rec.Capacity(), fdrRecords, fdrBytes)
	}
	err = r.finish(&sum, firstErr)
	r.applyRetention(ctx, &sum)
	return err
}

// wire builds the store, the HTTP uploader and the recorder.
func (r *run) wire(ctx context.Context) error {
	store, err := r.opts.Store(ctx)
	if err != nil {
		return fmt.Errorf("open the tile store: %w", err)
	}
	// Every batch this run claims names it (host, pid, run ID) and carries
	// a lease it renews while it works.
	r.store = store.ForRun(tilestore.Run{ID: r.opts.RunID, Lease: r.cfg.Upload.Lease})
	r.locks = tilestore.NewRunLocks(r.cfg.CacheDir)
	blobs, err := tilestore.NewBlobStore(r.cfg.CacheDir)
	if err != nil {
		return fmt.Errorf("open the blob cache %s: %w", r.cfg.CacheDir, err)
	}
	tlsConf, err := r.cfg.ProviderTLS(time.Now())
	if err != nil {
		return exitcode.UsageError(err)
	}
	var dial func(ctx context.Context, network, addr string) (net.Conn, error)
	var wrap func(http.RoundTripper) http.RoundTripper
	if r.opts.HTTPClient == nil {
		r.sockets = sockmeter.New(nil, r.opts.Clock.Now)
		// A batch's request carries its operation ID as its idempotency
		// key (the provider contract), which its BatchProgress names:
		// answered, it counts in flight until the progress has it settled.
		r.sockets.HoldAnswers(operation.HeaderIdempotencyKey)
		dial, wrap = r.sockets.DialContext, r.sockets.RoundTripper
	}
	inner, err := uploader.NewClient(uploader.ClientOptions{
		BaseURL: r.cfg.ProviderURL, Token: r.cfg.ProviderToken.Reveal(), Store: r.store, Blobs: blobs,
		Logger: r.log, HTTPClient: r.opts.HTTPClient, TLS: tlsConf, InsecureSkipVerify: r.cfg.Upload.InsecureSkipVerify,
		RequestTimeout: r.cfg.Upload.RequestTimeout, FirstContactTimeout: r.cfg.Upload.FirstContactTimeout,
		UserAgent:      "tilectl/" + r.opts.Version,
		CacheDirSource: r.cfg.Source("cache_dir").String(),
		Now:            r.opts.Clock.Now, Sleep: r.opts.Clock.Sleep,
		Breaker: uploader.BreakerOptions{
			FailureThreshold: offIfZero(r.cfg.Upload.BreakerFailures),
			Cooldown:         r.cfg.Upload.BreakerCooldown, MaxCooldown: r.cfg.Upload.BreakerMaxCooldown,
			OutageLimit: r.cfg.Upload.OutageLimit, OnChange: r.breakerChanged,
		},
		Jitter:        r.retry.Jitter,
		ResendBudget:  float64(offIfZero(r.cfg.Upload.ResendBudget)),
		ResendRatio:   float64(offIfZero(r.cfg.Upload.ResendBudgetPercent)) / 100,
		ClientID:      r.cfg.Upload.ClientID,
		Liveness:      r.locks,
		Pace:          r.sent,
		DialContext:   dial,
		WrapTransport: wrap,
	})
	if err != nil {
		return exitcode.UsageError(err)
	}
	r.inner = inner
	if r.decorate && !r.opts.DryRun {
		open := r.opts.OpenFDR
		if open == nil {
			log := r.log
			open = func(ctx context.Context, path string, capacity int64) (GiveUpRecorder, error) {
				rec, err := fdr.Open(ctx, path, fdr.Options{Capacity: capacity, Logf: func(format string, args ...any) {
					log.Warn().Str("fdr_path", path).Msgf(format, args...)
				}})
				if err != nil {
					return nil, err
				}
				return retrydecorator.RingRecorder{Recorder: rec}, nil
			}
		}
		rec, err := open(ctx, r.cfg.FDRPath, r.cfg.FDRCapacityBytes)
		if err != nil {
			return fmt.Errorf("open the flight data recorder %s: %w", r.cfg.FDRPath, err)
		}
		r.rec = rec
	}
	if !r.opts.DryRun {
		r.holdLock()
	}
	return nil
}

// holdLock takes this run's lock file before it claims any batch and
// holds it for the run's life: another run on this machine that can take
// it knows this run is gone and adopts its batches at once. Without it
// (an unwritable cache dir, say) the run still works; others then wait
// for its leases if it dies.
func (r *run) holdLock() {
	lock, err := r.locks.Hold(r.store.Run().ID)
	if err != nil {
		r.log.Warn().Err(err).Msg("cannot hold this run's lock file; if this run dies, its batches wait for their leases to end")
		return
	}
	r.lock = lock
}

// releaseLock removes this run's lock file, and those of runs that ended
// without removing theirs (their locks are free) and hold no open batch:
// a dead run's file is kept while its batches wait for a run to adopt them.
func (r *run) releaseLock(ctx context.Context) {
	if r.lock == nil {
		return
	}
	if err := r.lock.Release(); err != nil {
		r.log.Warn().Err(err).Msg("remove this run's lock file")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ls, err := r.store.Leases(ctx, "")
	if err != nil {
		return // stale lock files are harmless; pruning waits for a run that can tell which
	}
	holding := map[string]bool{}
	for _, l := range ls {
		holding[l.RunID] = true
	}
	if _, err := r.locks.Prune(func(id string) bool { return holding[id] }); err != nil {
		r.log.Warn().Err(err).Msg("remove the lock files of ended runs")
	}
}

// offIfZero maps a configuration's 0 ("none") to the uploader's negative
// ("none"; its 0 means "the default").
func offIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// breakerChanged logs the breaker's state changes: one line when the
// provider becomes unavailable and one when it is back, however many
// workers are waiting. A progress display renders from the same events.
func (r *run) breakerChanged(e uploader.BreakerEvent) {
	if p := r.progress.Load(); p != nil {
		p.breaker(e)
	}
	switch e.State {
	case uploader.BreakerOpen:
		r.log.Warn().Time("unavailable_since", e.Since).Time("next_probe_at", e.RetryAt).Int("openings", e.Openings).
			Msg("provider unavailable; sending paused until a probe succeeds")
	case uploader.BreakerClosed:
		r.log.Info().Int("openings", e.Openings).Msg("provider available again; sending resumed")
	}
}

// flights is --flight, or every on_ground flight with pending tiles.
func (r *run) flights(ctx context.Context) ([]string, error) {
	if r.opts.FlightID != "" {
		return []string{r.opts.FlightID}, nil
	}
	counts, err := r.store.FlightCounts(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list flights with pending tiles: %w", err)
	}
	var ids []string
	var skipped []tilestore.FlightCounts
	var skippedTiles int64
	for _, c := range counts {
		pending := c.ByStatus[tilestore.StatusPending] + c.ByStatus[tilestore.StatusTrusted]
		switch {
		case pending == 0:
		case c.State == tilestore.FlightOnGround:
			ids = append(ids, c.FlightID)
		default:
			skipped = append(skipped, c)
			skippedTiles += pending
		}
	}
	slices.Sort(ids)
	if len(skipped) > 0 {
		r.logSkipped(skipped, skippedTiles)
	}
	return ids, nil
}

// logSkipped says which flights with pending tiles a run over every flight
// leaves alone, and why: only a landed (on_ground) flight is uploaded.
func (r *run) logSkipped(skipped []tilestore.FlightCounts, tiles int64) {
	slices.SortFunc(skipped, func(a, b tilestore.FlightCounts) int { return strings.Compare(a.FlightID, b.FlightID) })
	const shown = 5
	var names []string
	for i, c := range skipped {
		if i == shown {
			names = append(names, fmt.Sprintf("and %d more", len(skipped)-shown))
			break
		}
		names = append(names, fmt.Sprintf("%s (%s)", c.FlightID, c.State))
	}
	r.log.Info().Int("skipped_flights", len(skipped)).Int64("skipped_pending_tiles", tiles).
		Msgf("skipped %s with %s, not on_ground: %s; only a landed flight is uploaded. "+
			"Once one has landed, record it with 'tilectl flights land ID', then run upload-pending again",
			plural(len(skipped), "flight"), plural(int(tiles), "pending tile"), strings.Join(names, ", "))
}

// flight uploads one flight, sharing it with any other run on it.
func (r *run) flight(ctx context.Context, id string) (FlightSummary, error) {
	started := r.opts.Clock.Now()
	// The run history is a record, not the job: its write (a commit that
	// waits for the disk) goes beside the upload's start, not before it,
	// and is done before the flight's end is recorded (endRuns).
	var recorded sync.WaitGroup
	defer recorded.Wait()
	if !r.opts.DryRun { // a dry run changes nothing, the history included
		recorded.Go(func() { r.startRun(ctx, id, started) })
	}
	p := newProgress(id, -1, 0, r.opts.IO.StatusLine(), r.opts.Quiet, r.log, r.newTicker, r.cfg.Upload.ProgressInterval, r.metrics, r.opts.Clock.Now)
	p.limiter.Store(r.limiter)
	var s sockets // nil, not a nil *sockmeter.Meter, when there is none
	if r.sockets != nil {
		s = r.sockets
	}
	p.countWire(r.sent, s)
	r.progress.Store(p)
	defer r.progress.Store(nil)
	stopWatch := r.watchInterrupt(ctx, p, id)
	// Counting a large flight's pending tiles takes a scan of them: the
	// display gets the total when it is known and the first batch does
	// not wait for it.
	var bytes *int64 // nil until counted
	var counted sync.WaitGroup
	counted.Go(func() {
		tiles, b, err := r.store.PendingSummary(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn().Err(err).Msg("count the flight's pending tiles for the progress display")
			}
			return
		}
		bytes = &b
		p.setTotal(tiles, b)
	})
	up := r.inner
	if r.decorate && !r.opts.DryRun {
		up = retrydecorator.New(r.inner, r.store, r.rec, r.log, r.opts.Clock, r.retry, p.hooks())
	}
	req := uploader.Request{FlightID: id, BatchSize: r.cfg.Upload.BatchSize,
		Concurrency: r.cfg.Upload.Concurrency.Batches(), DryRun: r.opts.DryRun, Progress: p.batch, Settling: p.settle,
		Waiting: p.wait, Holding: p.holding, Order: tilestore.Order(r.cfg.Upload.Order)}
	// A run must not send a tile that the next count gives up: without the
	// decorator nothing counts in this run, and with it another run sharing
	// the flight may have recorded a rejection this run has not counted.
	req.MaxAttempts = r.retry.MaxPerTileAttempts
	rep, err := up.UploadPendingTiles(ctx, req)
	counted.Wait()
	stopWatch()
	p.finish()
	if rep.FlightID == "" {
		rep.FlightID = id
	}
	// A dry run's pending tiles are those it would send; its bytes are the
	// count's.
	pending, pendingBytes := &rep.Pending, bytes
	if !r.opts.DryRun {
		var awaiting *int64 // give-ups of the flight after the run; nil when not counted
		// The run's context may be past its deadline; the count still helps.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		// The uploader counted what is left as it ended; a run that ended
		// on an error may not have, and is counted again: when that count
		// fails too, what is left is not known (nil), not 0.
		if err == nil {
			pendingBytes = &rep.PendingBytes
		} else if n, b, perr := r.store.PendingSummary(cctx, id); perr == nil {
			rep.Pending = n
			pending, pendingBytes = &n, &b
		} else {
			pending, pendingBytes = nil, nil
		}
		// Once the database is gone, every read below fails the same way:
		// the run's error says so once, not each of them again.
		quiet := databaseLost(err)
		// A real run that ended without an error took its last look at who
		// holds the flight as it ended: the report has what it saw (nil:
		// nobody). A dry run or a failed run may not have looked, and asks.
		var held uploader.Held
		var herr error
		switch {
		case err == nil && !r.opts.DryRun:
			if rep.Held != nil {
				held = *rep.Held
			}
		default:
			held, _, herr = uploader.HeldWork(cctx, r.store, r.locks, r.store.Run(), id)
		}
		if n, gerr := r.rejectedNowGivenUp(cctx, rep); gerr == nil {
			rep.GivenUp = max(rep.GivenUp, n)
		} else if !quiet {
			r.log.Warn().Err(gerr).Msg("read the status of this run's rejected tiles")
		}
		if n, gerr := r.store.GiveUpCount(cctx, id); gerr == nil {
			awaiting = &n
		}
		cancel()
		if herr != nil && !quiet {
			r.log.Warn().Err(herr).Msg("list other runs' leases")
		}
		r.metrics.AddFlight(metricsfile.FlightRun{Flight: id, Accepted: rep.Accepted, Duplicate: rep.Duplicate,
			RejectedTiles: len(rep.Rejections), Rejections: rep.Rejected, GivenUp: rep.GivenUp, Bytes: rep.Bytes,
			Duration: r.opts.Clock.Now().Sub(started), Finished: r.opts.Clock.Now(),
			Success: err == nil && pending != nil && *pending == 0 && rep.GivenUp == 0, Pending: pending,
			NextRetryAt: rep.NextRetryAt})
		r.metrics.Add(metricsfile.Counts{Accepted: rep.Accepted, Duplicate: rep.Duplicate, Rejected: rep.Rejected,
			GivenUp: rep.GivenUp, Retries: rep.RetryCount, Timeouts: rep.Timeouts, Replayed: rep.Replayed,
			Concurrency: rep.Concurrency})
		r.metrics.AddTraffic(metricsfile.Traffic{Requests: rep.Requests, FirstAttempts: rep.FirstAttempts,
			Resends: rep.Resends, ResendsRefused: rep.ResendsRefused, BreakerOpenings: rep.BreakerOpenings})
		fs := flightSummary(rep, pending, pendingBytes, err, r.opts.DryRun)
		fs.holdBy(held)
		fs.GiveUpsAwaitingReview = awaiting
		return fs, err
	}
	return flightSummary(rep, pending, pendingBytes, err, r.opts.DryRun), err
}

// unstarted is the part of the run of a flight that the run's end (its
// deadline, an interruption) kept from starting: nothing of it was sent,
// and what it leaves is counted apart, unknown (nil) where a count fails
// or the run's budget for these counts (unstartedCountBudget) is spent.
// With tiles pending, or a pending count not known, the flight's work was
// cut by that end: its error is the context's, which the caller words as
// the deadline reached or the interruption. A flight with nothing pending
// (another run finished it) was not cut.
func (r *run) unstarted(ctx context.Context, id string) (FlightSummary, error) {
	now := r.opts.Clock.Now()
	rep := uploader.Report{FlightID: id, Started: now, Finished: now}
	// The run's context has ended; the counts still tell what is left,
	// within the budget all the flights it kept from starting share.
	if r.unstartedBy.IsZero() {
		budget := r.unstartedBudget
		if budget == 0 {
			budget = unstartedCountBudget
		}
		r.unstartedBy = time.Now().Add(budget)
	}
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), r.unstartedBy)
	defer cancel()
	var pending *int
	var pendingBytes *int64
	n, b, perr := r.store.PendingSummary(cctx, id)
	if perr == nil {
		pending, pendingBytes = &n, &b
	}
	var awaiting *int64
	if g, gerr := r.store.GiveUpCount(cctx, id); gerr == nil {
		awaiting = &g
	}
	held, _, herr := uploader.HeldWork(cctx, r.store, r.locks, r.store.Run(), id)
	for _, e := range []error{perr, herr} {
		if e != nil && !databaseLost(e) {
			r.log.Warn().Err(e).Str("flight_id", id).Msg("count what a flight the run did not start leaves")
		}
	}
	var err error
	if pending == nil || *pending > 0 {
		err = fmt.Errorf("flight %s not started: %w", id, ctx.Err())
	}
	fs := flightSummary(rep, pending, pendingBytes, err, r.opts.DryRun)
	if herr == nil {
		fs.holdBy(held)
	}
	fs.GiveUpsAwaitingReview = awaiting
	return fs, err
}

// rejectedNowGivenUp counts the tiles this run saw rejected that are now
// given up, whichever run counted their last rejection: with runs sharing a
// flight, another run may have counted it first, and the give-up still
// belongs in this run's outcome (exit 3), not a success.
func (r *run) rejectedNowGivenUp(ctx context.Context, rep uploader.Report) (int, error) {
	var ids []string
	seen := map[string]bool{}
	for _, rj := range rep.Rejections {
		if !seen[rj.TileID] {
			seen[rj.TileID] = true
			ids = append(ids, rj.TileID)
		}
	}
	tiles, err := r.store.TilesByID(ctx, ids)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tiles {
		if t.VotingStatus == tilestore.StatusUploadGiveup {
			n++
		}
	}
	return n, nil
}

// finish decides the outcome and exit code, writes the metrics file and
// prints the summary.
func (r *run) finish(sum *Summary, runErr error) error {
	sum.SLI = sliOf(sum.Counts, r.metrics)
	switch {
	case sum.Interrupted:
		sum.Outcome, sum.ExitCode = "interrupted", exitcode.Code(runErr)
		msg := runErr.Error()
		sum.Error = &msg
	case runErr != nil:
		sum.Outcome, sum.ExitCode = string(uploader.OutcomeFailure), exitcode.Code(runErr)
		msg := runErr.Error()
		sum.Error = &msg
	case r.opts.DryRun && sum.LocalFailed > 0:
		sum.Outcome, sum.ExitCode = "dry_run", exitcode.Partial
	case r.opts.DryRun:
		sum.Outcome, sum.ExitCode = "dry_run", exitcode.OK
	case sum.pendingLeft() || sum.GivenUp > 0:
		sum.Outcome, sum.ExitCode = string(uploader.OutcomePartial), exitcode.Partial
	default:
		sum.Outcome, sum.ExitCode = string(uploader.OutcomeSuccess), exitcode.OK
	}
	if r.cfg.Upload.MetricsFile != "" && !r.opts.DryRun {
		if err := r.metrics.WriteFile(r.cfg.Upload.MetricsFile); err != nil {
			r.log.Error().Err(err).Msg("write metrics file")
			if runErr == nil { // the upload went as reported, its outputs did not: exit 1
				runErr = err
				sum.ExitCode = exitcode.Failure
				msg := err.Error()
				sum.Error = &msg
			}
		}
	}
	r.endRuns(sum)
	r.reported = true
	var printErr error
	if r.opts.Output == "json" {
		printErr = sum.writeJSON(r.opts.IO.Out)
	} else {
		printErr = sum.writeText(r.opts.IO.Out)
	}
	switch {
	case runErr != nil:
		return runErr
	case printErr != nil:
		return fmt.Errorf("print the summary: %w", printErr)
	case sum.ExitCode == exitcode.Partial && sum.LocalFailed > 0:
		return exitcode.New(exitcode.Partial, localFailuresError(sum))
	case sum.ExitCode == exitcode.Partial:
		return exitcode.New(exitcode.Partial, nil) // the summary said it all
	}
	return nil
}

// localFailuresError is what a run that left tiles pending for their
// cached blobs tells the operator to do.
func localFailuresError(sum *Summary) error {
	flight := "FLIGHT"
	if len(sum.LocalFailures) > 0 {
		flight = sum.LocalFailures[0].FlightID
	}
	return fmt.Errorf("%s not sent because their cached blob is missing, unreadable or changed "+
		"(listed above; they stay pending and no attempt was counted): run 'tilectl tiles verify --flight %s' "+
		"to list every bad blob, then import the flight's original directory again "+
		"('tilectl tiles import --flight %s DIR' restores them) and run upload-pending again",
		iostreams.Count(sum.LocalFailed, "tile was", "tiles were"), flight, flight)
}

// logSchedule weighs the run's retry schedule against its deadline. The
// deadline bounds the run whatever
// the schedule: a run it ends leaves its open batches and pending tiles to
// the next run, under the same keys, so a worst case longer than the
// deadline loses nothing and is only logged. What cannot work is a deadline
// too short for one request to take its full request timeout: a slow
// request would be cut on every run. That warns, naming where both values
// came from. --strict-deadline refuses to start unless the whole worst case
// fits: every inner call's request taking its request timeout on each of
// its attempts, the HTTP uploader's resends included, with every transport
// backoff and every decorator backoff at its largest.
func (r *run) logSchedule() error {
	// One request and its HTTP-level resends; the deadline here is only a
	// formality of Validate.
	request, err := operation.Schedule{
		MaxAttempts:    uploader.DefaultMaxResends + 1,
		AttemptTimeout: r.cfg.Upload.RequestTimeout,
		Deadline:       operation.MaxHintDelay,
		Backoff:        uploader.TransportBackoff(r.retry.Jitter),
	}.Validate()
	if err != nil {
		r.log.Warn().Err(err).Msg("cannot bound the retry schedule")
		return nil
	}
	deadline := fmt.Sprintf("upload.deadline %s (from %s)", r.cfg.Upload.Deadline, r.cfg.Source("upload.deadline"))
	margin := r.cfg.Upload.Deadline / 20
	if rt := r.cfg.Upload.RequestTimeout; rt > r.cfg.Upload.Deadline-margin {
		msg := fmt.Sprintf("upload.request_timeout %s (from %s) does not fit %s minus a %s margin: "+
			"a request that takes its full time cannot finish before the deadline ends the run",
			rt, r.cfg.Source("upload.request_timeout"), deadline, margin)
		if r.opts.StrictDeadline {
			return fmt.Errorf("--strict-deadline: %s; raise upload.deadline or lower upload.request_timeout", msg)
		}
		r.log.Warn().Str("request_timeout", rt.String()).Str("deadline", r.cfg.Upload.Deadline.String()).
			Msg(msg + "; raise upload.deadline or lower upload.request_timeout")
		return nil
	}
	sched := operation.Schedule{
		MaxAttempts:    r.retry.MaxInCallRetries + 1,
		AttemptTimeout: request,
		Deadline:       r.cfg.Upload.Deadline,
		Margin:         margin,
		Backoff:        operation.Backoff{Base: r.retry.BackoffBase, Cap: r.retry.BackoffCap, Jitter: r.retry.Jitter},
	}
	worst, err := sched.Validate()
	switch {
	case errors.Is(err, operation.ErrScheduleExceedsDeadline):
		msg := fmt.Sprintf("the retries' worst case is %s (%d inner calls x (%d attempts x %s request timeout + transport backoffs) + backoffs), "+
			"more than %s minus a %s margin", worst, sched.MaxAttempts, uploader.DefaultMaxResends+1,
			r.cfg.Upload.RequestTimeout, deadline, margin)
		if r.opts.StrictDeadline {
			return fmt.Errorf("--strict-deadline: %s; raise upload.deadline or lower upload.request_timeout / retry.max_in_call_retries / retry.backoff_cap", msg)
		}
		r.log.Info().Str("worst_case", worst.String()).Str("deadline", r.cfg.Upload.Deadline.String()).
			Msg(msg + ": if it comes to that, the deadline ends the run and the next run resumes its batches under the same keys")
	case err != nil:
		r.log.Warn().Err(err).Msg("cannot bound the retry schedule")
	default:
		r.log.Info().Str("worst_case", worst.String()).Str("deadline", r.cfg.Upload.Deadline.String()).
			Msg("retry schedule fits the deadline")
	}
	return nil
}
