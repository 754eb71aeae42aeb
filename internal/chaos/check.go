package chaos

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// checkRound loads both sides' records and checks every invariant.
// clientID is the round's Client-Id, "" for a round run without one.
func (s *soak) checkRound(ctx context.Context, flight, clientID string, start roundStart, faults faultStats, victims, damaged []string) error {
	cv, err := loadClientView(ctx, s.dbs.url(s.dbs.client, "tilechaos_checker"), s.fdr, flight)
	if err != nil {
		return err
	}
	journal, err := journalStates(ctx, s.dbs.url(s.dbs.client, "tilechaos_checker"))
	if err != nil {
		return err
	}
	opIDs := make([]string, 0, len(cv.Batches))
	for _, b := range cv.Batches {
		opIDs = append(opIDs, b.OpID)
	}
	pv, err := loadProviderView(ctx, s.dbs.providerURL(), flight, opIDs)
	if err != nil {
		return err
	}
	sealed, err := sealedOKOps(ctx, s.dbs.providerURL())
	if err != nil {
		return err
	}
	var sq *seqFacts
	if clientID != "" {
		if sq, err = s.loadSeqFacts(ctx, clientID, start, sealed); err != nil {
			return err
		}
	}
	before := len(s.chk.violations)
	s.chk.checkRound(roundFacts{FlightID: flight, Victims: victims, Damaged: damaged, Client: cv, Provider: pv, Faults: faults,
		SealedOK: sealed, JournalState: journal, Budget: tileBudget, Seq: sq, SequencesBefore: start.sequences})
	for _, t := range cv.Tiles {
		switch t.Status {
		case "uploaded":
			s.rep.Uploaded++
		case "upload_giveup":
			s.rep.GivenUp++
		}
	}
	fmt.Fprintf(s.cfg.Log, "  checked: %d batches, %d rejections, %d new violation(s)\n",
		len(cv.Batches), len(cv.Rejections), len(s.chk.violations)-before)
	return nil
}

func journalStates(ctx context.Context, dbURL string) (map[string]string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("read tilectl's database: %w", err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT op_id, state FROM upload_batches`)
	out := map[string]string{}
	var id, st string
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error { out[id] = st; return nil })
	if err != nil {
		return nil, fmt.Errorf("read tilectl's batch journal: %w", err)
	}
	return out, nil
}
