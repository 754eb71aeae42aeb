package chaos

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Strict client sequencing in the soak. The provider always runs with
// --strict-sequencing (a request without Client-Id passes through, so an
// unsequenced round must see no difference), and every other round, by
// seed, runs upload-pending with a client ID of its own and --concurrency
// 1. The sequences are read from both sides' own tables: the provider's
// client_sequences (package optable, PGSequenceStore) and tilectl's
// upload_client_sequences (migration 0010).

// Invariant names of sequencing.
const (
	invSeqCount      = "provider-sequence-equals-batches-committed"
	invSeqNotAhead   = "client-sequence-never-ahead-of-provider"
	invSeqSettled    = "client-sequence-equals-provider-after-round"
	invSeqOthers     = "only-the-rounds-client-sequence-moves"
	invSeqNumbered   = "sequenced-batch-numbered-once"
	invSeqUnnumbered = "unsequenced-batch-carries-no-number"
)

// sequenced says whether round n of a soak with seed runs with a client ID:
// every other round, starting with the first or the second by the seed's
// parity, so any two rounds in a row hold one of each.
func sequenced(seed uint64, n int) bool { return (seed+uint64(n))%2 == 1 }

// clientIDFor is round n's Client-Id.
func clientIDFor(flight string) string { return "client-" + flight }

// seqFacts is a sequenced round's view of both sides' sequences.
type seqFacts struct {
	ClientID string
	// ClientLast is tilectl's upload_client_sequences.last_committed for
	// the client, ClientRows how many streams (providers) hold it: the
	// provider's URL is the same all round, so one.
	ClientLast uint64
	ClientRows int
	// Committed are the operations the provider sealed with 200 during
	// the round (not sealed before it): under the round's client ID each
	// consumed exactly one number.
	Committed []string
}

// seqKey names one of the provider's sequences: its caller scope and the
// client ID.
type seqKey struct{ Scope, Client string }

func (k seqKey) String() string { return k.Scope + "/" + k.Client }

// providerSequences reads the provider's client_sequences, every row.
func providerSequences(ctx context.Context, conn *pgx.Conn) (map[seqKey]uint64, error) {
	rows, _ := conn.Query(ctx, `SELECT scope, client_id, last_committed FROM client_sequences`)
	out := map[seqKey]uint64{}
	var k seqKey
	var last int64
	if _, err := pgx.ForEachRow(rows, []any{&k.Scope, &k.Client, &last}, func() error {
		out[k] = uint64(last)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the provider's client sequences: %w", err)
	}
	return out, nil
}

// providerLast is the client's last committed number at the provider in
// seqs (0 when it has none), and how many scopes hold the client.
func providerLast(seqs map[seqKey]uint64, clientID string) (last uint64, rows int) {
	for k, v := range seqs {
		if k.Client == clientID {
			last, rows = max(last, v), rows+1
		}
	}
	return last, rows
}

// clientSequence reads tilectl's last committed number for clientID (the
// largest over its streams) and how many streams hold it.
func clientSequence(ctx context.Context, dbURL, clientID string) (uint64, int, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, fmt.Errorf("read tilectl's database: %w", err)
	}
	defer conn.Close(ctx)
	var last int64
	var rows int
	err = conn.QueryRow(ctx, `SELECT coalesce(max(last_committed), 0), count(*)::int
		FROM upload_client_sequences WHERE client_id = $1`, clientID).Scan(&last, &rows)
	if err != nil {
		return 0, 0, fmt.Errorf("read tilectl's sequence of client %s: %w", clientID, err)
	}
	return uint64(last), rows, nil
}

// checkSequenceNotAhead is evaluated after every run of a sequenced round,
// killed or not: tilectl counts a number committed only on the provider's
// word, so it is never ahead of the provider.
func (s *soak) checkSequenceNotAhead(ctx context.Context, flight, clientID string) error {
	cl, _, err := clientSequence(ctx, s.dbs.url(s.dbs.client, "tilechaos_checker"), clientID)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, s.dbs.providerURL())
	if err != nil {
		return fmt.Errorf("read the provider's database: %w", err)
	}
	defer conn.Close(ctx)
	seqs, err := providerSequences(ctx, conn)
	if err != nil {
		return err
	}
	pl, _ := providerLast(seqs, clientID)
	s.chk.check(invSeqNotAhead, cl <= pl,
		"flight %s: tilectl counts client %s's number %d committed, the provider only %d", flight, clientID, cl, pl)
	return nil
}

// checkSequences evaluates the sequencing invariants of one round.
func (c *checker) checkSequences(f roundFacts) {
	pv, sq := f.Provider, f.Seq
	// Only the round's client's sequence may move at the provider: an
	// unsequenced round (requests without Client-Id) moves none.
	var moved []string
	for k, v := range pv.Sequences {
		if prev, had := f.SequencesBefore[k]; (!had || prev != v) && (sq == nil || k.Client != sq.ClientID) {
			moved = append(moved, fmt.Sprintf("%s %d->%d", k, prev, v))
		}
	}
	for k, prev := range f.SequencesBefore {
		if _, has := pv.Sequences[k]; !has {
			moved = append(moved, fmt.Sprintf("%s %d->gone", k, prev))
		}
	}
	slices.Sort(moved)
	c.check(invSeqOthers, len(moved) == 0, "in a round run with client ID %q the provider's sequences moved: %v", clientOf(sq), moved)
	if sq == nil {
		for _, b := range f.Client.Batches {
			c.check(invSeqUnnumbered, b.ClientSeq == nil, "batch %s of a round without a client ID carries sequence %v", b.OpID, b.ClientSeq)
		}
		return
	}
	last, rows := providerLast(pv.Sequences, sq.ClientID)
	c.check(invSeqCount, rows <= 1 && last == uint64(len(sq.Committed)),
		"client %s: the provider's last committed sequence is %d (%d scope(s)), but it sealed %d batch(es) with 200 in the round %v",
		sq.ClientID, last, rows, len(sq.Committed), sq.Committed)
	c.check(invSeqNotAhead, sq.ClientLast <= last,
		"client %s: tilectl counts number %d committed, the provider only %d", sq.ClientID, sq.ClientLast, last)
	c.check(invSeqSettled, sq.ClientRows == 1 && sq.ClientLast == last,
		"client %s: after the round tilectl's last committed number is %d (%d stream(s)), the provider's %d",
		sq.ClientID, sq.ClientLast, sq.ClientRows, last)
	// Every batch of the round carries a number; no number is settled by
	// two batches, and none is past what tilectl counts committed.
	settledBy := map[int64]string{}
	for _, b := range f.Client.Batches {
		if b.ClientSeq == nil {
			c.check(invSeqNumbered, false, "batch %s of client %s's round carries no sequence number", b.OpID, sq.ClientID)
			continue
		}
		n := *b.ClientSeq
		if b.State != "settled" {
			continue
		}
		prev, twice := settledBy[n]
		c.check(invSeqNumbered, !twice && n >= 1 && uint64(n) <= sq.ClientLast,
			"batch %s settled under number %d (also settled by %q; tilectl's last committed %d)", b.OpID, n, prev, sq.ClientLast)
		settledBy[n] = b.OpID
	}
}

func clientOf(sq *seqFacts) string {
	if sq == nil {
		return ""
	}
	return sq.ClientID
}

// roundStart is the provider's state before a round's first run: what it
// had sealed with 200 and its client sequences.
type roundStart struct {
	sealed    map[string]bool
	sequences map[seqKey]uint64
}

func (s *soak) readRoundStart(ctx context.Context) (roundStart, error) {
	ids, err := sealedOKOps(ctx, s.dbs.providerURL())
	if err != nil {
		return roundStart{}, err
	}
	st := roundStart{sealed: make(map[string]bool, len(ids))}
	for _, id := range ids {
		st.sealed[id] = true
	}
	conn, err := pgx.Connect(ctx, s.dbs.providerURL())
	if err != nil {
		return roundStart{}, fmt.Errorf("read the provider's database: %w", err)
	}
	defer conn.Close(ctx)
	st.sequences, err = providerSequences(ctx, conn)
	return st, err
}

// loadSeqFacts reads a sequenced round's facts; sealed is every operation
// the provider holds sealed with 200 now.
func (s *soak) loadSeqFacts(ctx context.Context, clientID string, start roundStart, sealed []string) (*seqFacts, error) {
	last, rows, err := clientSequence(ctx, s.dbs.url(s.dbs.client, "tilechaos_checker"), clientID)
	if err != nil {
		return nil, err
	}
	sq := &seqFacts{ClientID: clientID, ClientLast: last, ClientRows: rows}
	for _, id := range sealed {
		if !start.sealed[id] {
			sq.Committed = append(sq.Committed, id)
		}
	}
	slices.Sort(sq.Committed)
	return sq, nil
}
