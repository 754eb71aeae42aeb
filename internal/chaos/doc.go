package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The markers around the part of docs/chaos.md that a soak run with -doc
// rewrites: everything between them is the last long run's record.
const (
	DocBegin = "<!-- tilechaos -doc: the last long run, written by the soak; do not edit by hand -->"
	DocEnd   = "<!-- end of the last long run -->"
)

// DocRun is what the record says besides the report: how the soak was
// started and on what.
type DocRun struct {
	Command string // e.g. "make chaos ROUNDS=200 TILES=12"
	Machine string // e.g. "2 x AMD EPYC 7B13, 23 GiB"
}

// WriteDoc writes the last run's record: one paragraph on how and where it
// ran, the table, and what the table says, every figure taken from r.
func (r *Report) WriteDoc(w io.Writer, run DocRun) error {
	checks := 0
	for _, v := range r.Checked {
		checks += v
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d rounds (%d of them with a client ID, strict sequencing), `%s`, on %s; the soak's own PostgreSQL cluster and binaries it built; %s wall.\n\n",
		r.Rounds, r.SequencedRounds, run.Command, run.Machine, r.Took.Round(1e7))
	b.WriteString("```\n")
	if err := r.WriteTable(&b); err != nil {
		return err
	}
	b.WriteString("```\n\nReading it:\n\n")
	if len(r.Violations) == 0 {
		fmt.Fprintf(&b, "- **0 violations** over %d evaluations of %d invariants.\n", checks, len(r.Checked))
	} else {
		fmt.Fprintf(&b, "- **%d violations** (listed under the table) over %d evaluations of %d invariants.\n",
			len(r.Violations), checks, len(r.Checked))
	}
	if r.AbortedIn > 0 {
		fmt.Fprintf(&b, "- The soak stopped on an error in round %d; the table counts the rounds that finished.\n", r.AbortedIn)
	}
	fmt.Fprintf(&b, "- %d database restarts (`pg_ctl restart -m immediate`), %d of them while a batch was executing at the provider, and %d provider SIGKILLs with restarts, %d mid-batch; %d / %d of %d rounds had a database restart / a provider crash while a run was going (a round whose work was done first ends without one).\n",
		r.DBRestarts, r.DBRestartsMidBatch, r.ProviderKills, r.ProviderKillsMidBatch,
		r.RoundsWithDBRestart, r.RoundsWithProviderCrash, r.Rounds)
	fmt.Fprintf(&b, "- %d tiles uploaded, each held once by the provider (`stored-at-most-once`), and %d given up, the poison tile of each round among them (`poison-tile-given-up`), none of them held by the provider (`given-up-tile-not-held-by-provider`).\n",
		r.Uploaded, r.GivenUp)
	fmt.Fprintf(&b, "- %d runs were SIGKILLed and %d database connections broken under a run; runs that ended on an error left their batches to the next run, which settled them under the same keys (`no-open-batch-after-round`).\n",
		r.Kills, r.DBBreaks)
	_, err := w.Write(b.Bytes())
	return err
}

// ReplaceDoc returns doc with the part between DocBegin and DocEnd replaced
// by section.
func ReplaceDoc(doc, section []byte) ([]byte, error) {
	s := string(doc)
	i := strings.Index(s, DocBegin)
	j := strings.Index(s, DocEnd)
	if i < 0 || j < i {
		return nil, errors.New("the document has no last-run markers (" + DocBegin + " ... " + DocEnd + ")")
	}
	var out strings.Builder
	out.WriteString(s[:i+len(DocBegin)])
	out.WriteString("\n\n")
	out.Write(section)
	out.WriteString("\n")
	out.WriteString(s[j:])
	return []byte(out.String()), nil
}
