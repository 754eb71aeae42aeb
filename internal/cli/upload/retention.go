package upload

import (
	"context"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// applyRetention prunes, after a run that ended with success, the cached
// blobs of tiles uploaded longer ago than cache.retention, and the journal
// rows of finished flights, as `tilectl flights prune --uploaded-before`
// does. What it freed is logged; a prune that fails is a WARN and never
// changes the run's outcome: the upload is done, and the next run or
// `flights prune` frees the space.
func (r *run) applyRetention(ctx context.Context, sum *Summary) {
	age := r.cfg.RetentionAge()
	if age <= 0 || r.opts.DryRun || sum.Outcome != string(uploader.OutcomeSuccess) || sum.ExitCode != exitcode.OK {
		return
	}
	before := r.opts.Clock.Now().Add(-age)
	blobs, err := tilestore.NewBlobStore(r.cfg.CacheDir)
	var res tilestore.PruneResult
	if err == nil {
		res, err = r.store.Prune(ctx, blobs, tilestore.PruneRequest{UploadedBefore: before})
	}
	if err != nil {
		r.log.Warn().Err(err).Str("retention", r.cfg.Cache.Retention).
			Msg("cache retention: could not prune the blobs of uploaded tiles; the upload is done, 'tilectl flights prune' frees them")
		return
	}
	r.log.Info().Str("retention", r.cfg.Cache.Retention).Time("uploaded_before", before).
		Int64("tiles", res.Tiles).Int64("files", res.Files).Int64("disk_bytes", res.DiskBytes).
		Int64("journal_batches", res.Journal.Batches).Int64("journal_rejections", res.Journal.Rejections).
		Int64("journal_row_bytes", res.Journal.RowBytes).
		Msg("cache retention: pruned the cached blobs of tiles uploaded before the retention")
}
