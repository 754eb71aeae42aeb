// Package flights is `tilectl flights`: a ground station's view of its
// flights (list) and the record of a landing (land).
//
// `flights list -o json` prints one object, a stable interface:
//
//	{"flights": [{
//	   "flight_id":   "F-2026-11-22",
//	   "state":       "on_ground",                 // or "airborne"
//	   "recorded_at": "2026-11-22T09:00:00Z",      // when the flight was first recorded (tiles import)
//	   "age_seconds": 3600,                        // whole seconds since recorded_at
//	   "counts":      {"pending": 0, "trusted": 0, "rejected": 0, "uploaded": 0, "upload_giveup": 0},
//	   "total":       0,                           // the flight's tiles
//	   "cache_bytes": 0,                           // sum of size_bytes of the tiles whose blob is in the cache
//	   "last_run":    null or {                    // the newest upload-pending run on the flight, by start
//	       "run_id": "...", "host": "...", "pid": 1,
//	       "started_at": "...",
//	       "finished": true,                       // false: still running, or killed before it recorded its end
//	       "finished_at": "..." or null,
//	       "outcome": "success" or null,           // the run's outcome, null while not finished
//	       "exit_code": 0 or null}
//	}]}
//
// Every status is present in counts (0 when none); flights is [] when no
// flight is recorded.
//
// `flights land F` writes one durable flight-data record of kind
// LandedKind (payload LandedPayload) per landing.
//
// `flights prune -o json` prints one object on every exit:
//
//	{"dry_run": false,
//	 "flight_id": "F-2026-11-22" or null,            // null: every flight
//	 "uploaded_before": "2026-11-15T09:00:00Z" or null,
//	 "disk": {"tiles": 0,          // uploaded tiles whose blob is now pruned
//	          "files": 0,          // blob files removed
//	          "bytes": 0,          // the space they took on disk (allocated blocks)
//	          "recorded_bytes": 0, // the pruned tiles' recorded sizes
//	          "already_gone": 0,   // pruned tiles whose blob was already missing
//	          "kept_shared": 0,    // uploaded tiles whose blob a tile still needing it names
//	          "dirs": 0},          // directories left empty and removed
//	 "database": {"flights": [],   // finished flights whose journal was pruned
//	              "batches": 0, "rejections": 0,  // rows dropped
//	              "row_bytes": 0,                 // their stored size
//	              "journal_table_bytes_before": 0, "journal_table_bytes_after": 0},
//	 "error": null or "..."}
//
// `flights delete F -o json` prints {"flight_id", "deleted", "forced",
// "tiles", "batches", "rejections", "runs", "files", "disk_bytes",
// "error"}; each deletion writes one durable record of kind DeletedKind
// (payload DeletedPayload) before anything is removed.
package flights

import (
	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/factory"
)

// NewCmdFlights is the `flights` group.
func NewCmdFlights(f *factory.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "flights <command>",
		Short: "List flights, record landings, free the cache, delete flights",
	}
	cmd.AddCommand(NewCmdList(f, nil))
	cmd.AddCommand(NewCmdLand(f, nil))
	cmd.AddCommand(NewCmdPrune(f, nil))
	cmd.AddCommand(NewCmdDelete(f, nil))
	return cmd
}
