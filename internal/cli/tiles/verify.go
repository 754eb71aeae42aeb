package tiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// verifyPage is how many tiles one page holds: memory stays bounded
// however large the flight.
const verifyPage = 500

// VerifyOptions are `tiles verify`'s inputs.
type VerifyOptions struct {
	IO     *iostreams.IOStreams
	Config func() (*config.Config, error)
	Store  func(ctx context.Context) (*tilestore.Store, error)

	FlightID string // "" = every flight
	Output   string // text or json
}

// VerifyProblem is one tile whose cached blob is bad.
type VerifyProblem struct {
	FlightID string `json:"flight_id"`
	uploader.LocalFailure
}

// VerifySummary is what `tiles verify -o json` prints.
type VerifySummary struct {
	FlightID string          `json:"flight_id,omitempty"` // "" = every flight
	CacheDir string          `json:"cache_dir"`
	Checked  int             `json:"checked"` // tiles not yet uploaded
	Sound    int             `json:"sound"`
	Problems []VerifyProblem `json:"problems"`
	// PrunedUploaded counts uploaded tiles whose cached blob was pruned
	// (flights prune, cache.retention): the provider holds them and their
	// bytes are gone from this station; verify does not check them.
	PrunedUploaded int64 `json:"pruned_uploaded"`
}

// NewCmdVerify is `tiles verify [--flight F] [-o text|json]`.
func NewCmdVerify(f *factory.Factory, runF func(context.Context, *VerifyOptions) error) *cobra.Command {
	opts := &VerifyOptions{IO: f.IOStreams, Config: f.Config, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "verify [--flight F] [-o text|json]",
		Short: "Check the cached blob of every tile not yet uploaded",
		Long: "Check every tile not yet uploaded (of one flight, or of all) against its cached\n" +
			"blob: the file exists, has the recorded size and the recorded sha256. Each bad\n" +
			"blob is listed with its tile, path and problem (blob_missing, blob_unreadable,\n" +
			"blob_wrong_size, blob_wrong_sha256). Importing the flight's original directory\n" +
			"again ('tilectl tiles import --flight F DIR') restores them.\n\n" +
			"Exit codes: 0 every blob is sound; 1 some are not (or the check failed).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.FlightID != "" {
				if err := tilestore.ValidateFlightID(opts.FlightID); err != nil {
					return exitcode.UsageError(fmt.Errorf("--flight: %w", err))
				}
			}
			if opts.Output != "text" && opts.Output != "json" {
				return exitcode.UsageError(fmt.Errorf("-o must be text or json, got %q", opts.Output))
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return VerifyRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.FlightID, "flight", "", "verify only this flight (default: every flight)")
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "text", "output format: text or json")
	return cmd
}

// errBlobsBad is wrapped in the exit-1 error of a verify that found bad blobs.
var errBlobsBad = errors.New("some cached blobs are bad")

// VerifyRun pages through the tiles not yet uploaded, checking each blob.
func VerifyRun(ctx context.Context, opts *VerifyOptions) error {
	cfg, err := opts.Config()
	if err != nil {
		return err
	}
	store, err := opts.Store(ctx)
	if err != nil {
		return err
	}
	if opts.FlightID != "" {
		if _, err := store.Flight(ctx, opts.FlightID); err != nil {
			return fmt.Errorf("verify flight %s: %w", opts.FlightID, err)
		}
	}
	blobs, err := tilestore.NewBlobStore(cfg.CacheDir)
	if err != nil {
		return fmt.Errorf("open the blob cache %s (%s): %w", cfg.CacheDir, cfg.Source("cache_dir"), err)
	}
	total := -1
	if opts.IO.IsStderrTTY() {
		total = countNotUploaded(ctx, store, opts.FlightID)
	}
	sum := VerifySummary{FlightID: opts.FlightID, CacheDir: blobs.Root(), Problems: []VerifyProblem{}}
	after := ""
	for {
		page, err := store.NotUploaded(ctx, opts.FlightID, after, verifyPage)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		var bad []*uploader.LocalFailure
		for _, t := range page {
			lf, err := uploader.CheckBlob(blobs, t, uploader.CheckSHA256)
			if err != nil {
				return fmt.Errorf("verify: %w", err)
			}
			bad = append(bad, lf)
		}
		if err := notePruned(ctx, store, bad); err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		for i, t := range page {
			lf := bad[i]
			sum.Checked++
			if lf == nil {
				sum.Sound++
			} else {
				sum.Problems = append(sum.Problems, VerifyProblem{FlightID: t.FlightID, LocalFailure: *lf})
				if opts.Output == "text" {
					fmt.Fprintf(opts.IO.Out, "%s  %s  %s: %s\n", lf.TileID, lf.Problem, lf.CachePath, lf.Message)
				}
			}
		}
		if total >= 0 {
			fmt.Fprintf(opts.IO.ErrOut, "\rverifying blobs: %d/%d tiles, %d bad", sum.Checked, total, len(sum.Problems))
		}
		if len(page) < verifyPage {
			break
		}
		after = page[len(page)-1].ID
	}
	if total >= 0 {
		fmt.Fprintln(opts.IO.ErrOut)
	}
	if sum.PrunedUploaded, err = store.PrunedUploaded(ctx, opts.FlightID); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if err := writeVerify(opts.IO.Out, opts.Output, sum); err != nil {
		return fmt.Errorf("print the summary: %w", err)
	}
	if len(sum.Problems) == 0 {
		return nil
	}
	flight := opts.FlightID
	if flight == "" {
		flight = sum.Problems[0].FlightID
	}
	return exitcode.New(exitcode.Failure, fmt.Errorf("%w: %d of %s not yet uploaded have a bad blob in %s (%s); "+
		"import the flight's original directory again to restore them ('tilectl tiles import --flight %s DIR')",
		errBlobsBad, len(sum.Problems), iostreams.Count(sum.Checked, "tile", "tiles"), blobs.Root(), cfg.Source("cache_dir"), flight))
}

// countNotUploaded is the progress bar's total; -1 hides the total when it
// cannot be counted (verify itself does not need it).
func countNotUploaded(ctx context.Context, store *tilestore.Store, flightID string) int {
	counts, err := store.FlightCounts(ctx, flightID)
	if err != nil {
		return -1
	}
	n := int64(0)
	for _, c := range counts {
		for st, k := range c.ByStatus {
			if st != tilestore.StatusUploaded {
				n += k
			}
		}
	}
	return int(n)
}

func writeVerify(w io.Writer, format string, s VerifySummary) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	_, err := fmt.Fprintf(w, "checked %s not yet uploaded in %s: %d sound, %d bad\n",
		iostreams.Count(s.Checked, "tile", "tiles"), s.CacheDir, s.Sound, len(s.Problems))
	if err == nil && s.PrunedUploaded > 0 {
		_, err = fmt.Fprintf(w, "%s: their cached blobs were pruned, the provider holds them and their bytes are gone from this station\n",
			iostreams.Count(s.PrunedUploaded, "uploaded tile is not checked", "uploaded tiles are not checked"))
	}
	return err
}

// notePruned says, of each missing blob whose tile a prune freed (a tile
// moved back to pending after its upload), that its bytes were pruned.
func notePruned(ctx context.Context, store *tilestore.Store, bad []*uploader.LocalFailure) error {
	var ids []string
	for _, lf := range bad {
		if lf != nil && lf.Problem == uploader.ProblemBlobMissing {
			ids = append(ids, lf.TileID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	pruned, err := store.PrunedBlobs(ctx, ids)
	if err != nil {
		return err
	}
	for _, lf := range bad {
		if at, ok := pruned[lf.TileID]; ok && lf.Problem == uploader.ProblemBlobMissing {
			lf.Message = fmt.Sprintf("its cached blob was pruned at %s after an upload: the bytes are gone from this station; "+
				"import the flight's original directory again to restore them", at.UTC().Format(time.RFC3339))
		}
	}
	return nil
}
