package tiles

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/uploader"
)

// ReconcileFinding is one uploaded tile the provider does not hold as the
// tile store says.
type ReconcileFinding struct {
	TileID string `json:"tile_id"`
	// Verdict is lacks (404 TILE_NOT_FOUND), holds_other (another sha256
	// or size) or unclear (no clear answer after resends; the provider may
	// well hold it).
	Verdict uploader.Verdict `json:"verdict"`
	SHA256  string           `json:"sha256"`
	Size    int64            `json:"size"`
	// ProviderSHA256 and ProviderSize are what the provider holds
	// (holds_other only).
	ProviderSHA256 string `json:"provider_sha256,omitempty"`
	ProviderSize   int64  `json:"provider_size,omitempty"`
	// Status is the lookup's last HTTP status (unclear only; 0: no answer).
	Status int `json:"status,omitempty"`
}

// ReconcileSummary is what `tiles reconcile -o json` prints, one object on
// every exit. Fields are added, never renamed.
//
//   - outcome: held (exit 0), differs (exit 3), interrupted (130/143),
//     failure (1 or 2, with error)
//   - total: uploaded tiles of the flight when the pass started (resumed
//     passes: when this run started); checked: tiles answered so far, an
//     interrupted pass's earlier part included (resumed_checked of them)
//   - held, lacks, holds_other, unclear: tiles by verdict
//   - tiles: every finding (lacks, holds_other, unclear), in tile_id order
//     within each run of the pass
//   - requeued: tiles moved back to pending (--requeue; null without it),
//     requeued_missing_blob: those of them whose cached blob is gone
//     (import the flight's directory again before uploading)
//   - lookups_window_min: the smallest number of lookups the pass let in
//     flight (below the start when the provider was strained)
type ReconcileSummary struct {
	FlightID            string             `json:"flight_id"`
	Outcome             string             `json:"outcome"`
	ExitCode            int                `json:"exit_code"`
	Total               int                `json:"total"`
	Checked             int                `json:"checked"`
	ResumedChecked      int                `json:"resumed_checked"`
	ResumedAfter        *string            `json:"resumed_after"`
	Held                int                `json:"held"`
	Lacks               int                `json:"lacks"`
	HoldsOther          int                `json:"holds_other"`
	Unclear             int                `json:"unclear"`
	Tiles               []ReconcileFinding `json:"tiles"`
	Requeued            *int               `json:"requeued"`
	RequeuedMissingBlob []string           `json:"requeued_missing_blob,omitempty"`
	LookupsWindowMin    int                `json:"lookups_window_min"`
	Elapsed             float64            `json:"elapsed_seconds"`
	TilesPerSecond      float64            `json:"tiles_per_second"`
	Error               *string            `json:"error"`
}

func (s *ReconcileSummary) add(fd ReconcileFinding) {
	switch fd.Verdict {
	case uploader.Lacks:
		s.Lacks++
	case uploader.HoldsOther:
		s.HoldsOther++
	default:
		s.Unclear++
	}
	s.Tiles = append(s.Tiles, fd)
}

func (r *reconciler) write() error {
	if r.opts.Output == iostreams.OutputJSON {
		enc := json.NewEncoder(r.opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(r.sum)
	}
	if r.sum.Outcome == "failure" {
		return nil // the error is printed on stderr
	}
	return writeReconcileText(r.opts.IO.Out, &r.sum)
}

func writeReconcileText(w io.Writer, s *ReconcileSummary) error {
	for _, fd := range s.Tiles {
		var err error
		switch fd.Verdict {
		case uploader.Lacks:
			_, err = fmt.Fprintf(w, "%s  lacks\n", fd.TileID)
		case uploader.HoldsOther:
			_, err = fmt.Fprintf(w, "%s  holds_other  provider sha256 %s size %d; ours %s size %d\n",
				fd.TileID, clip12(fd.ProviderSHA256), fd.ProviderSize, clip12(fd.SHA256), fd.Size)
		default:
			_, err = fmt.Fprintf(w, "%s  unclear  no clear answer after resends (last status %d)\n", fd.TileID, fd.Status)
		}
		if err != nil {
			return err
		}
	}
	verb := "reconciled"
	if s.Outcome == "interrupted" {
		verb = "interrupted reconciling"
	}
	_, err := fmt.Fprintf(w, "%s flight %s: %d of %s checked in %s: %d held, %d lacking, %d with other bytes, %d unclear\n",
		verb, s.FlightID, s.Checked, iostreams.Count(s.Total, "uploaded tile", "uploaded tiles"),
		iostreams.HumanDuration(time.Duration(s.Elapsed*float64(time.Second))), s.Held, s.Lacks, s.HoldsOther, s.Unclear)
	if err != nil {
		return err
	}
	switch {
	case s.Requeued != nil:
		_, err = fmt.Fprintf(w, "requeued %s; run 'tilectl upload-pending --flight %s' to send them again\n",
			iostreams.Count(*s.Requeued, "tile", "tiles"), s.FlightID)
		if err == nil && len(s.RequeuedMissingBlob) > 0 {
			_, err = fmt.Fprintf(w, "%s no longer in the cache: import the flight's directory again first ('tilectl tiles import --flight %s DIR')\n",
				iostreams.Count(len(s.RequeuedMissingBlob), "requeued tile's blob is", "requeued tiles' blobs are"), s.FlightID)
		}
	case s.Lacks+s.HoldsOther > 0 && s.Outcome != "interrupted":
		_, err = fmt.Fprintf(w, "next: 'tilectl tiles reconcile --flight %s --requeue' moves them back to pending for the next upload\n", s.FlightID)
	case s.Unclear > 0 && s.Outcome != "interrupted":
		_, err = fmt.Fprintf(w, "the provider gave no clear answer about %s: run the reconcile again later\n",
			iostreams.Count(s.Unclear, "tile", "tiles"))
	}
	return err
}

func clip12(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
