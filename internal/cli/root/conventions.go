package root

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/tilestore"
)

// examples are every command's `Examples:` section, by command path, kept
// in one place so help reads alike across commands. A command missing here
// (and setting none itself) fails TestEveryCommandHasExamples.
var examples = map[string]string{
	"tilectl": "  tilectl migrate up\n" +
		"  tilectl tiles import --flight F-2026-11-22 ./tiles\n" +
		"  tilectl upload-pending --flight F-2026-11-22\n" +
		"  tilectl status --flight F-2026-11-22",
	"tilectl upload-pending": "  # every pending tile of one landed flight, with a progress display on a terminal\n" +
		"  tilectl upload-pending --flight F-2026-11-22\n\n" +
		"  # every landed flight, for a timer: errors and the summary only, JSON on stdout\n" +
		"  tilectl upload-pending --quiet -o json --metrics-file /var/lib/node_exporter/textfile/tilectl.prom\n\n" +
		"  # what would be sent, without sending or changing anything\n" +
		"  tilectl upload-pending --flight F-2026-11-22 --dry-run",
	"tilectl status": "  tilectl status\n" +
		"  tilectl status --flight F-2026-11-22 --limit 20\n" +
		"  tilectl status -o json | jq '.give_ups_total'",
	"tilectl migrate":         "  tilectl migrate up\n  tilectl migrate version -o json",
	"tilectl migrate up":      "  tilectl migrate up\n  tilectl migrate up -o json",
	"tilectl migrate down":    "  tilectl migrate down        # the last migration\n  tilectl migrate down 2 -o json",
	"tilectl migrate version": "  tilectl migrate version\n  tilectl migrate version -o json",
	"tilectl migrate force":   "  # after a migration failed halfway and the schema was repaired by hand\n  tilectl migrate force 4",
	"tilectl tiles":           "  tilectl tiles import --flight F-2026-11-22 ./tiles",
	"tilectl tiles import": "  tilectl tiles import --flight F-2026-11-22 ./tiles\n" +
		"  tilectl tiles import --flight F-2026-11-22 --state airborne --skip-invalid -o json ./tiles",
	"tilectl tiles verify": "  tilectl tiles verify --flight F-2026-11-22\n  tilectl tiles verify -o json",
	"tilectl tiles requeue": "  # one tile, once the cause of its give-up is fixed ('tilectl status' lists given-up tiles)\n" +
		"  tilectl tiles requeue --flight F-2026-11-22 --tile F-2026-11-22-18-140000-90000 --reason 'provider fixed its decoder'\n\n" +
		"  # every given-up tile of the flight, off a terminal\n" +
		"  tilectl tiles requeue --flight F-2026-11-22 --all-given-up --reason 'provider outage over' --yes",
	"tilectl tiles reconcile": "  # after a provider incident: does it still hold every uploaded tile, with the same bytes?\n" +
		"  tilectl tiles reconcile --flight F-2026-11-22\n\n" +
		"  # send again what it lost (the next upload-pending run does)\n" +
		"  tilectl tiles reconcile --flight F-2026-11-22 --requeue -o json",
	"tilectl flights":      "  tilectl flights list\n  tilectl flights land F-2026-11-22\n  tilectl flights prune --uploaded-before 7d",
	"tilectl flights list": "  tilectl flights list\n  tilectl flights list -o json | jq '.flights[] | {flight_id, cache_bytes}'",
	"tilectl flights land": "  # the aircraft is on the ground: its tiles may now be uploaded\n" +
		"  tilectl flights land F-2026-11-22\n  tilectl upload-pending",
	"tilectl flights prune": "  # what pruning the blobs uploaded more than a week ago would free, then prune them\n" +
		"  tilectl flights prune --uploaded-before 7d --dry-run\n" +
		"  tilectl flights prune --uploaded-before 7d\n\n" +
		"  # one flight, for a script\n" +
		"  tilectl flights prune --flight F-2026-11-22 -o json | jq '.disk.bytes, .database.row_bytes'",
	"tilectl flights delete": "  tilectl flights delete F-2026-11-22-test --reason 'test card imported by mistake'\n\n" +
		"  # off a terminal, and even with tiles still pending\n" +
		"  tilectl flights delete F-2026-11-22-test --reason 'duplicate import' --force --yes",
	"tilectl fdr": "  tilectl fdr tail -n 20",
	"tilectl fdr tail": "  tilectl fdr tail -n 20\n" +
		"  tilectl fdr tail -f --kind upload.giveup -o json",
	"tilectl version": "  tilectl version\n  tilectl --version\n  tilectl version -o json",
}

// enumFlags are the completions of flags that take one of a fixed set of
// values, wherever a command has them.
var enumFlags = map[string][]string{
	"output":    {"text\tfor people", "json\tstable, for scripts"},
	"state":     {"on_ground\tthe flight has landed: its tiles may be uploaded", "airborne\tstill flying: nothing is uploaded"},
	"log-level": {"trace", "debug", "info", "warn", "error"},
	"kind": {"upload.giveup\ta tile given up after too many rejections",
		"upload.requeue\ta given-up tile moved back to pending",
		"upload.reconcile\tuploaded tiles the provider lacks moved back to pending by tiles reconcile",
		"flight.landed\ta flight set on_ground by flights land",
		"flight.deleted\ta flight removed by flights delete"},
}

// flightArg are the commands whose one argument is a flight ID, completed
// like --flight.
var flightArg = map[string]bool{"tilectl flights land": true, "tilectl flights delete": true}

// applyConventions walks the command tree: Examples from the table, and
// shell completion for --flight and the flightArg commands' argument
// (flight IDs from the database) and for every enum flag, so that
// completing them never offers file names.
func applyConventions(f *factory.Factory, cmd *cobra.Command) {
	if cmd.Example == "" {
		cmd.Example = examples[cmd.CommandPath()]
	}
	for name, values := range enumFlags {
		if has(cmd, name) && !hasCompletion(cmd, name) {
			_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		}
	}
	if has(cmd, "flight") && !hasCompletion(cmd, "flight") {
		_ = cmd.RegisterFlagCompletionFunc("flight", completeFlights(f))
	}
	if flightArg[cmd.CommandPath()] && cmd.ValidArgsFunction == nil {
		cmd.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeFlights(f)(c, args, toComplete)
		}
	}
	for _, sub := range cmd.Commands() {
		applyConventions(f, sub)
	}
}

// has reports whether cmd declares the flag, locally or as a persistent one.
func has(cmd *cobra.Command, flag string) bool {
	return cmd.Flags().Lookup(flag) != nil || cmd.PersistentFlags().Lookup(flag) != nil
}

func hasCompletion(cmd *cobra.Command, flag string) bool {
	_, ok := cmd.GetFlagCompletionFunc(flag)
	return ok
}

// completeFlights offers the flight IDs in the database that start with
// what was typed. It gives nothing, quietly, when the database cannot be
// reached within two seconds: completion must never hang or print errors.
func completeFlights(f *factory.Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		bindGlobalFlags(f, cmd) // --database-url on the line being completed
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		store, err := f.Store(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		counts, err := store.FlightCounts(ctx, "")
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, c := range counts {
			if strings.HasPrefix(c.FlightID, toComplete) {
				out = append(out, c.FlightID+"\t"+flightHint(c))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func flightHint(c tilestore.FlightCounts) string {
	pending := c.ByStatus[tilestore.StatusPending] + c.ByStatus[tilestore.StatusTrusted]
	return string(c.State) + ", " + itoa(pending) + " pending"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
