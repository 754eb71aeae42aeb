package tiles

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/whoami"
	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// reconcilePage is how many uploaded tiles are read, checked and
// checkpointed at a time.
const reconcilePage = 1000

// Unclear answers are asked again, page by page, after these waits; the
// lookup itself has already resent as the provider advised. An answer the
// uploader's classifier makes final (uploader.Lookup.Final) is not asked
// again: it would come back the same.
var reconcileUnclearWaits = []time.Duration{time.Second, 3 * time.Second}

// tileLooker asks the provider about one tile (*uploader.Client).
type tileLooker interface {
	LookUpTile(ctx context.Context, flightID string, tl tilestore.Tile) (uploader.Lookup, error)
}

var _ tileLooker = (*uploader.Client)(nil)

// reconciler is one ReconcileRun.
type reconciler struct {
	opts    *ReconcileOptions
	sum     ReconcileSummary
	started time.Time
	pace    *aimd
	checked atomic.Int64 // tiles answered so far, the resumed part included
}

func (r *reconciler) now() time.Time {
	if r.opts.Now != nil {
		return r.opts.Now()
	}
	return time.Now()
}

func (r *reconciler) sleep(ctx context.Context, d time.Duration) error {
	if r.opts.Sleep != nil {
		return r.opts.Sleep(ctx, d)
	}
	return operation.Sleep(ctx, d)
}

func (r *reconciler) elapsed() time.Duration {
	if r.started.IsZero() {
		return 0
	}
	return r.now().Sub(r.started)
}

func (r *reconciler) run(ctx context.Context) error {
	r.started = r.now()
	cfg, err := r.opts.Config()
	if err != nil {
		return err
	}
	store, err := r.opts.Store(ctx)
	if err != nil {
		return err
	}
	if _, err := store.Flight(ctx, r.opts.FlightID); errors.Is(err, tilestore.ErrFlightNotFound) {
		return exitcode.UsageError(fmt.Errorf("flight %s is not known to the tile store", r.opts.FlightID))
	} else if err != nil {
		return fmt.Errorf("reconcile flight %s: %w", r.opts.FlightID, err)
	}
	if !cfg.ProviderToken.IsSet() {
		return exitcode.UsageError(fmt.Errorf("no provider token (from %s): set TILECTL_PROVIDER_TOKEN, --provider-token-file FILE or provider_token in the config file",
			cfg.Source("provider_token")))
	}
	log := r.opts.Logger()
	look, err := r.lookupClient(ctx, cfg, store, log)
	if err != nil {
		return err
	}
	cps := newCheckpointDir(cfg.CacheDir, r.opts.FlightID)
	if r.opts.Restart {
		if err := cps.remove(); err != nil {
			return err
		}
	}
	cp, findings, resumed, err := cps.load()
	if err != nil {
		return err
	}
	if resumed {
		after := cp.After
		r.sum.ResumedAfter = &after
		r.sum.ResumedChecked, r.sum.Held = cp.Checked, cp.Held
		for _, fd := range findings {
			r.sum.add(fd)
		}
		log.Info().Str("flight_id", r.opts.FlightID).Str("after_tile_id", cp.After).Int("checked", cp.Checked).
			Time("started_at", cp.StartedAt).Msg("resuming an interrupted reconcile")
	} else {
		cp = reconcileCheckpoint{FlightID: r.opts.FlightID, StartedAt: r.started}
	}
	r.checked.Store(int64(cp.Checked))
	r.sum.Checked = cp.Checked
	r.sum.Total = cp.Checked + countUploadedAfter(ctx, store, r.opts.FlightID, cp.After)
	r.pace = newAIMD(reconcileStartLookups, reconcileMaxLookups)
	defer func() { r.sum.LookupsWindowMin = int(r.pace.lowWater) }()

	stopProgress := r.showProgress(log)
	err = r.pass(ctx, store, look, cps, &cp)
	stopProgress()
	r.sum.Checked = cp.Checked
	if err != nil {
		return err
	}
	if r.opts.Requeue {
		if err := r.requeue(ctx, cfg, store); err != nil {
			return err
		}
	}
	return cps.remove()
}

// lookupClient is the uploader's HTTP client, used for lookups only: the
// contract's tile lookup with its resends, breaker and first contact.
func (r *reconciler) lookupClient(ctx context.Context, cfg *config.Config, store *tilestore.Store, log zerolog.Logger) (tileLooker, error) {
	blobs, err := tilestore.NewBlobStore(cfg.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("open the blob cache %s (%s): %w", cfg.CacheDir, cfg.Source("cache_dir"), err)
	}
	tlsConf, err := cfg.ProviderTLS(time.Now())
	if err != nil {
		return nil, exitcode.UsageError(err)
	}
	// Lookups are many and small: the resend budget is the run's own
	// (one token per lookup and a fifth more), as for batches.
	u, err := uploader.NewClient(uploader.ClientOptions{
		BaseURL: cfg.ProviderURL, Token: cfg.ProviderToken.Reveal(), Store: store, Blobs: blobs, Logger: log,
		HTTPClient: r.opts.HTTPClient, TLS: tlsConf, InsecureSkipVerify: cfg.Upload.InsecureSkipVerify,
		RequestTimeout: cfg.Upload.RequestTimeout, FirstContactTimeout: cfg.Upload.FirstContactTimeout,
		UserAgent: "tilectl/" + r.opts.Version,
		Breaker: uploader.BreakerOptions{
			FailureThreshold: offIfZero(cfg.Upload.BreakerFailures), Cooldown: cfg.Upload.BreakerCooldown,
			MaxCooldown: cfg.Upload.BreakerMaxCooldown, OutageLimit: cfg.Upload.OutageLimit,
		},
		ResendBudget: float64(offIfZero(cfg.Upload.ResendBudget)),
		ResendRatio:  float64(offIfZero(cfg.Upload.ResendBudgetPercent)) / 100,
	})
	if err != nil {
		return nil, exitcode.UsageError(err)
	}
	if _, err := u.Capabilities(ctx); err != nil {
		return nil, fmt.Errorf("reconcile flight %s: provider %s (%s): %w", r.opts.FlightID, config.RedactURL(cfg.ProviderURL), cfg.Source("provider_url"), err)
	}
	return u, nil
}

// countUploadedAfter is the progress total: the flight's uploaded tiles
// after the checkpoint (all of them without one); 0 when it cannot count.
func countUploadedAfter(ctx context.Context, store *tilestore.Store, flightID, after string) int {
	var n int
	if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM tiles WHERE flight_id = $1 AND voting_status = 'uploaded' AND tile_id > $2`,
		flightID, after).Scan(&n); err != nil {
		return 0
	}
	return n
}

// pass checks page after page, checkpointing each.
func (r *reconciler) pass(ctx context.Context, store *tilestore.Store, look tileLooker, cps checkpointDir, cp *reconcileCheckpoint) error {
	for {
		page, err := store.Uploaded(ctx, r.opts.FlightID, cp.After, reconcilePage)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		if len(page) == 0 {
			return nil
		}
		held, found, err := r.checkPage(ctx, look, page)
		if err != nil {
			return err
		}
		cp.After, cp.Checked, cp.Held, cp.UpdatedAt = page[len(page)-1].ID, cp.Checked+len(page), cp.Held+held, r.now()
		if err := cps.save(cp, found); err != nil {
			return err
		}
		r.sum.Held = cp.Held
		for _, fd := range found {
			r.sum.add(fd)
		}
		if len(page) < reconcilePage {
			return nil
		}
	}
}

// checkPage looks up every tile of page, paced, asking again about those
// without a clear answer. A page is all or nothing: cancelled midway, none
// of it counts, and the next run checks it again.
func (r *reconciler) checkPage(ctx context.Context, look tileLooker, page []tilestore.Tile) (held int, found []ReconcileFinding, err error) {
	results := make([]uploader.Lookup, len(page))
	ask := make([]int, len(page))
	for i := range ask {
		ask[i] = i
	}
	for round := 0; ; round++ {
		if err := r.lookUpAll(ctx, look, page, ask, results); err != nil {
			return 0, nil, err
		}
		var again []int
		for _, i := range ask {
			if results[i].Verdict == uploader.Unclear && !results[i].Final {
				again = append(again, i)
			}
		}
		if len(again) == 0 || round == len(reconcileUnclearWaits) {
			break
		}
		if err := r.sleep(ctx, reconcileUnclearWaits[round]); err != nil {
			return 0, nil, err
		}
		r.checked.Add(-int64(len(again)))
		ask = again
	}
	for i, l := range results {
		t := page[i]
		if l.Verdict == uploader.Holds {
			held++
			continue
		}
		fd := ReconcileFinding{TileID: t.ID, Verdict: l.Verdict, SHA256: t.SHA256, Size: t.SizeBytes}
		switch l.Verdict {
		case uploader.HoldsOther:
			fd.ProviderSHA256, fd.ProviderSize = l.SHA256, l.Size
		case uploader.Unclear:
			fd.Status = l.Status
		}
		found = append(found, fd)
	}
	return held, found, nil
}

// lookUpAll asks about page[i] for each i in idx, as many at once as the
// pacer lets through; the first run-ending error (401, 403, cancelled)
// stops it.
func (r *reconciler) lookUpAll(ctx context.Context, look tileLooker, page []tilestore.Tile, idx []int, out []uploader.Lookup) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, i := range idx {
		ticket, err := r.pace.acquire(ctx)
		if err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := look.LookUpTile(ctx, r.opts.FlightID, page[i])
			r.pace.release(ticket, l.Strained)
			if err != nil {
				cancel(err)
				return
			}
			out[i] = l
			r.checked.Add(1)
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// showProgress draws the status line on a terminal (every 200 ms) or logs
// a progress line every 5 s otherwise, until the returned stop is called.
func (r *reconciler) showProgress(log zerolog.Logger) (stop func()) {
	sl := r.opts.IO.StatusLine()
	every := 5 * time.Second
	if sl != nil {
		every = 200 * time.Millisecond
	}
	newTicker := r.opts.NewTicker
	if newTicker == nil {
		newTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	tick, stopTicker := newTicker(every)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-tick:
			}
			checked := r.checked.Load()
			inFlight, window := r.pace.inFlight()
			rate := float64(checked-int64(r.sum.ResumedChecked)) / max(r.elapsed().Seconds(), 1e-3)
			if sl != nil {
				sl.Set(fmt.Sprintf("reconciling %s: %d/%d tiles checked, %.0f tiles/s, %d lookups in flight (window %d)",
					r.opts.FlightID, checked, r.sum.Total, rate, inFlight, window))
				continue
			}
			log.Info().Str("flight_id", r.opts.FlightID).Int64("checked", checked).Int("total", r.sum.Total).
				Float64("tiles_per_second", rate).Int("window", window).Msg("reconcile progress")
		}
	}()
	return func() {
		close(done)
		<-exited
		stopTicker()
		if sl != nil {
			sl.Clear()
		}
	}
}

// ReconcilePayload is the flight-data record of a reconcile's requeue.
// TileIDs lists at most reconcileRecordIDs of them (the record must fit
// the ring); Requeued counts them all.
type ReconcilePayload struct {
	FlightID   string    `json:"flight_id"`
	Lacks      int       `json:"lacks"`
	HoldsOther int       `json:"holds_other"`
	Requeued   int       `json:"requeued"`
	TileIDs    []string  `json:"tile_ids"`
	More       int       `json:"more_tile_ids"` // requeued tiles not listed in TileIDs
	User       string    `json:"user"`
	Host       string    `json:"host"`
	At         time.Time `json:"requeued_at"`
}

const reconcileRecordIDs = 200

// requeue moves the tiles the provider lacks or holds with other bytes
// back to pending, with one durable flight-data record written in the same
// transaction's commit window (a failed record rolls the move back).
func (r *reconciler) requeue(ctx context.Context, cfg *config.Config, store *tilestore.Store) error {
	var ids []string
	for _, fd := range r.sum.Tiles {
		if fd.Verdict == uploader.Lacks || fd.Verdict == uploader.HoldsOther {
			ids = append(ids, fd.TileID)
		}
	}
	n := 0
	r.sum.Requeued = &n
	if len(ids) == 0 {
		return nil
	}
	rec, err := fdr.Open(ctx, cfg.FDRPath, fdr.Options{Capacity: cfg.FDRCapacityBytes})
	if err != nil {
		return fmt.Errorf("open the flight data recorder %s: %w", cfg.FDRPath, err)
	}
	defer rec.Close()
	rs, err := store.RequeueUploaded(ctx, r.opts.FlightID, ids, func(ctx context.Context, rs []tilestore.Requeued) error {
		p := ReconcilePayload{FlightID: r.opts.FlightID, Lacks: r.sum.Lacks, HoldsOther: r.sum.HoldsOther, Requeued: len(rs),
			User: whoami.User(), Host: whoami.Host(), At: rs[0].RequeuedAt}
		for i, q := range rs {
			if i == reconcileRecordIDs {
				p.More = len(rs) - i
				break
			}
			p.TileIDs = append(p.TileIDs, q.TileID)
		}
		_, err := rec.Append(ctx, fdr.Entry{Kind: ReconcileKind, Durable: true, Payload: p})
		return err
	})
	if err != nil {
		return err
	}
	n = len(rs)
	r.sum.RequeuedMissingBlob = missingBlobs(ctx, cfg, store, rs)
	return nil
}

// missingBlobs lists the requeued tiles whose cached blob is gone (freed
// after their upload): the next upload cannot send them until the
// flight's directory is imported again.
func missingBlobs(ctx context.Context, cfg *config.Config, store *tilestore.Store, rs []tilestore.Requeued) []string {
	blobs, err := tilestore.NewBlobStore(cfg.CacheDir)
	if err != nil {
		return nil
	}
	ids := make([]string, len(rs))
	for i, q := range rs {
		ids[i] = q.TileID
	}
	tiles, err := store.TilesByID(ctx, ids)
	if err != nil {
		return nil
	}
	var out []string
	for _, t := range tiles {
		if lf, err := uploader.CheckBlob(blobs, t, uploader.CheckSize); err == nil && lf != nil {
			out = append(out, t.ID)
		}
	}
	return out
}

// offIfZero maps a configured 0 ("off") to the uploader's negative "off"
// (its 0 means "default").
func offIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
