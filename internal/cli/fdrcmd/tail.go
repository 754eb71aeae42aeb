package fdrcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
)

// FollowFunc is fdr.Follow's shape; tests replace it.
type FollowFunc func(ctx context.Context, path string, after uint64, interval time.Duration, emit func(fdr.Record) error) error

// TailOptions are `fdr tail`'s inputs: dependencies first, then flags.
type TailOptions struct {
	IO *iostreams.IOStreams
	// Path resolves the ring file when --file is not given (config fdr_path).
	Path     func() (string, error)
	Follow   FollowFunc
	Interval time.Duration // -f polling interval

	File    string
	Follows bool
	Kind    string
	N       int
	Output  string
}

// NewCmdTail is `fdr tail [-f] [--kind K] [-n N] [-o text|json] [--file PATH]`.
func NewCmdTail(f *factory.Factory, runF func(context.Context, *TailOptions) error) *cobra.Command {
	opts := &TailOptions{
		IO:       f.IOStreams,
		Follow:   fdr.Follow,
		Interval: 250 * time.Millisecond,
		Path: func() (string, error) {
			c, err := f.Config()
			if err != nil {
				return "", err
			}
			return c.FDRPath, nil
		},
	}
	cmd := &cobra.Command{
		Use:   "tail [-f] [--kind K] [-n N] [-o text|json]",
		Short: "Print the recorder's records, oldest first; -f waits for new ones",
		Long: "Print the records in the flight data recorder, oldest first.\n\n" +
			"With -o json each record is one line: {\"seq\":N,\"kind\":\"...\",\"key\":\"...\",\n" +
			"\"time\":\"RFC 3339\",\"payload\":{...}}. Damaged records are skipped and reported\n" +
			"on stderr, with the sequence numbers they leave missing.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Output != "text" && opts.Output != "json" {
				return exitcode.UsageError(fmt.Errorf("-o must be text or json, got %q", opts.Output))
			}
			if opts.N < 0 {
				return exitcode.UsageError(fmt.Errorf("-n must be 0 (all) or more, got %d", opts.N))
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return tailRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&opts.Follows, "follow", "f", false, "keep printing records as they are appended (until interrupted)")
	fl.StringVar(&opts.Kind, "kind", "", "only records of this kind, e.g. upload.giveup")
	fl.IntVarP(&opts.N, "lines", "n", 0, "print only the last N records (0 = all)")
	fl.StringVarP(&opts.Output, "output", "o", "text", "output format: text or json")
	fl.StringVar(&opts.File, "file", "", "ring file to read (default: config fdr_path)")
	return cmd
}

func tailRun(ctx context.Context, opts *TailOptions) error {
	path := opts.File
	if path == "" {
		p, err := opts.Path()
		if err != nil {
			return err
		}
		path = p
	}
	recs, rep, err := fdr.ReadFile(ctx, path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// Nothing recorded yet is not a failure; -f waits for the file.
		fmt.Fprintf(opts.IO.ErrOut, "no flight data recorder at %s yet\n", path)
	case err != nil:
		return err
	}
	reportDamage(opts.IO.ErrOut, rep)
	var last uint64
	if len(recs) > 0 {
		last = recs[len(recs)-1].Seq
	}
	recs = filterKind(recs, opts.Kind)
	if opts.N > 0 && len(recs) > opts.N {
		recs = recs[len(recs)-opts.N:]
	}
	for _, r := range recs {
		if err := printRecord(opts.IO.Out, opts.Output, r); err != nil {
			return err
		}
	}
	if !opts.Follows {
		return nil
	}
	err = opts.Follow(ctx, path, last, opts.Interval, func(r fdr.Record) error {
		if opts.Kind != "" && r.Kind != opts.Kind {
			return nil
		}
		return printRecord(opts.IO.Out, opts.Output, r)
	})
	if errors.Is(err, context.Canceled) {
		return nil // interrupted: the normal end of -f
	}
	return err
}

// filterKind keeps the records of kind, asked for by today's name or by
// the name an earlier version wrote (records are read under today's).
func filterKind(recs []fdr.Record, kind string) []fdr.Record {
	if kind == "" {
		return recs
	}
	kind = fdr.CurrentKind(kind)
	out := recs[:0:0]
	for _, r := range recs {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

func reportDamage(w io.Writer, rep fdr.ReadReport) {
	if rep.HeaderDamaged {
		fmt.Fprintln(w, "fdr: header damaged; positions rebuilt from the records")
	}
	if rep.Skipped > 0 {
		fmt.Fprintf(w, "fdr: skipped %s\n", iostreams.Count(rep.Skipped, "damaged region", "damaged regions"))
	}
	if len(rep.Gaps) > 0 {
		var parts []string
		for _, g := range rep.Gaps {
			if g[0] == g[1] {
				parts = append(parts, fmt.Sprint(g[0]))
			} else {
				parts = append(parts, fmt.Sprintf("%d-%d", g[0], g[1]))
			}
		}
		fmt.Fprintf(w, "fdr: missing seq %s\n", strings.Join(parts, ", "))
	}
}

// jsonRecord is the stable `-o json` line.
type jsonRecord struct {
	Seq     uint64          `json:"seq"`
	Kind    string          `json:"kind"`
	Key     string          `json:"key"`
	Time    time.Time       `json:"time"`
	Payload json.RawMessage `json:"payload"`
}

func printRecord(w io.Writer, format string, r fdr.Record) error {
	if format == "json" {
		payload := r.Payload
		if len(payload) == 0 {
			payload = json.RawMessage("null")
		}
		b, err := json.Marshal(jsonRecord{Seq: r.Seq, Kind: r.Kind, Key: r.Key, Time: r.Time.UTC(), Payload: payload})
		if err != nil {
			return fmt.Errorf("encode record %d: %w", r.Seq, err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	key := ""
	if r.Key != "" {
		key = " key=" + r.Key
	}
	_, err := fmt.Fprintf(w, "%s #%d %s%s %s\n", r.Time.UTC().Format(time.RFC3339Nano), r.Seq, r.Kind, key, r.Payload)
	return err
}
