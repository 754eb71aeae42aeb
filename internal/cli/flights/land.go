package flights

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/whoami"
	"github.com/tilectl/tilectl/tilestore"
)

// LandedKind is the flight-data record kind of a flight set on_ground by
// `flights land`.
const LandedKind = "flight.landed"

// LandedPayload is what the record of a landing keeps: which flight, the
// state it left, who landed it from which host, and when (the database's
// time, the flight's new updated_at).
type LandedPayload struct {
	FlightID      string    `json:"flight_id"`
	PreviousState string    `json:"previous_state"`
	User          string    `json:"user"`
	Host          string    `json:"host"`
	LandedAt      time.Time `json:"landed_at"`
}

// LandedKey is the record's idempotency key: the flight and its row's
// updated_at before the landing (tilestore.Landing.RowVersion). A landing
// whose commit failed after its record was written, landed again, finds
// its record instead of writing a second one; a flight set airborne again
// (which moves updated_at) and landed again gets a record of its own.
func LandedKey(flightID string, rowVersion time.Time) string {
	return fmt.Sprintf("landed/%s/%d", flightID, rowVersion.UnixNano())
}

// LandStore is what `flights land` changes.
type LandStore interface {
	Land(ctx context.Context, flightID string, beforeCommit func(context.Context, tilestore.Landing) error) (tilestore.Landing, error)
}

var _ LandStore = (*tilestore.Store)(nil)

// LandOptions are `flights land`'s inputs.
type LandOptions struct {
	IO     *iostreams.IOStreams
	Config func() (*config.Config, error)
	Store  func(ctx context.Context) (LandStore, error)
	// User and Host name who lands the flight (the OS user and host name
	// in production).
	User, Host func() string

	FlightID string
}

// NewCmdLand is `flights land F`.
func NewCmdLand(f *factory.Factory, runF func(context.Context, *LandOptions) error) *cobra.Command {
	opts := &LandOptions{IO: f.IOStreams, Config: f.Config, User: whoami.User, Host: whoami.Host,
		Store: func(ctx context.Context) (LandStore, error) { return f.Store(ctx) }}
	cmd := &cobra.Command{
		Use:   "land F",
		Short: "Record that a flight has landed (set it on_ground), so its tiles are uploaded",
		Long: "Set flight F on_ground, the state in which upload-pending sends its tiles, without\n" +
			"importing its tiles again. Each landing writes one durable flight-data record (kind\n" +
			LandedKind + ") with the flight, the state it left, the OS user, the host and\n" +
			"the time; the flight's state changes only once that record is on disk.\n" +
			"A flight already on_ground is left as it is (exit 0, nothing recorded).\n" +
			"An unknown flight is refused (exit 2).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.FlightID = args[0]
			if err := tilestore.ValidateFlightID(opts.FlightID); err != nil {
				return exitcode.UsageError(fmt.Errorf("flight: %w", err))
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return LandRun(cmd.Context(), opts)
		},
	}
	return cmd
}

// LandRun lands the flight and records it.
func LandRun(ctx context.Context, opts *LandOptions) error {
	cfg, err := opts.Config()
	if err != nil {
		return err
	}
	store, err := opts.Store(ctx)
	if err != nil {
		return err
	}
	who, host := opts.User(), opts.Host()
	var rec *fdr.Recorder
	defer func() {
		if rec != nil {
			rec.Close()
		}
	}()
	l, err := store.Land(ctx, opts.FlightID, func(ctx context.Context, l tilestore.Landing) error {
		// Opened only for a real landing: a no-op touches no file.
		var err error
		if rec, err = fdr.Open(ctx, cfg.FDRPath, fdr.Options{Capacity: cfg.FDRCapacityBytes}); err != nil {
			return fmt.Errorf("open the flight data recorder %s: %w", cfg.FDRPath, err)
		}
		if _, err := rec.Append(ctx, fdr.Entry{Kind: LandedKind, Durable: true, Key: LandedKey(l.FlightID, l.RowVersion),
			Payload: LandedPayload{FlightID: l.FlightID, PreviousState: string(l.PreviousState),
				User: who, Host: host, LandedAt: l.LandedAt.UTC()}}); err != nil {
			return fmt.Errorf("record the landing of flight %s: %w", l.FlightID, err)
		}
		return nil
	})
	if errors.Is(err, tilestore.ErrFlightNotFound) {
		return exitcode.UsageError(fmt.Errorf("flight %s is not recorded: nothing was changed; "+
			"'tilectl flights list' lists the recorded flights, and "+
			"'tilectl tiles import --flight %s DIR' records a flight with its tiles", opts.FlightID, opts.FlightID))
	}
	if err != nil {
		return err
	}
	if !l.Changed {
		fmt.Fprintf(opts.IO.Out, "flight %s is already on_ground; nothing changed, nothing recorded\n", l.FlightID)
		return nil
	}
	fmt.Fprintf(opts.IO.Out, "flight %s landed: %s -> on_ground at %s by %s on %s (recorded as %s); "+
		"'tilectl upload-pending' now sends its pending tiles\n",
		l.FlightID, l.PreviousState, l.LandedAt.UTC().Format(time.RFC3339), who, host, LandedKind)
	return nil
}
