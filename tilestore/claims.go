package tilestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultLease is how long a batch stays its run's after the run last
// showed it was alive (Run.Lease's default).
const DefaultLease = 30 * time.Second

// Run names one upload process as the owner of the batches it claims. Any
// number of runs, on any number of machines, share a flight: each claims
// batches under its own ID and extends their lease while it works. Another
// run settles an open batch only once its lease has expired, or once it
// proved the run dead on the run's own host (RunLocks).
type Run struct {
	ID    string        // unique per run; default a random 128-bit hex string
	Host  string        // default os.Hostname
	PID   int           // default os.Getpid
	Lease time.Duration // default DefaultLease
}

// NewRun returns a Run for this process with a fresh ID and the defaults.
func NewRun() Run {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return Run{ID: hex.EncodeToString(b), Host: host, PID: os.Getpid(), Lease: DefaultLease}
}

// ForRun returns a Store on the same pool whose claims, leases and
// PendingSummary are those of run r (fields left zero take NewRun's).
func (s *Store) ForRun(r Run) *Store {
	d := NewRun()
	if r.ID == "" {
		r.ID = d.ID
	}
	if r.Host == "" {
		r.Host = d.Host
	}
	if r.PID == 0 {
		r.PID = d.PID
	}
	if r.Lease <= 0 {
		r.Lease = d.Lease
	}
	return &Store{pool: s.pool, run: r}
}

// Run returns the run this Store claims batches for.
func (s *Store) Run() Run { return s.run }

func (s *Store) leaseSecs() float64 { return s.run.Lease.Seconds() }

// Claim asks ClaimBatch for the next tiles of a flight.
type Claim struct {
	FlightID string
	// Limit caps the candidates locked (and so the batch's size).
	Limit int
	// MaxAttempts, when positive, leaves out tiles whose attempts plus
	// uncounted rejections reach it: the next count gives them up, so they
	// must not be sent again, whichever run rejected them last.
	MaxAttempts int
	// Exclude names tiles the caller does not want now (those it saw
	// rejected in this pass: they wait for the decorator's count).
	Exclude []string
	// LookedUp names the tiles awaiting a lookup (members of a failed
	// batch of the flight, or rejected with ReasonProtocolError: nothing
	// clear was settled for them) that the caller itself
	// asked the provider about and found not held: only these may travel
	// under a new key. Whichever run's batch failed, no other tile that
	// awaits a lookup is claimed.
	LookedUp []string
	// LookedUpAt is AmbiguousPending's asOf for the read LookedUp came
	// from. A looked-up tile that a failed batch or an unclear rejection
	// recorded at or after it names again (another run sent it meanwhile)
	// is not claimed: it needs a new lookup.
	LookedUpAt time.Time
	// Order is the order the flight's tiles are claimed in ("" is
	// OrderZoom); see claimSQL for what it promises.
	Order Order
	// After, when not zero, leaves out the tiles up to it in Order: a
	// caller that claims one batch after another passes the Last of its
	// previous claim, so the scan starts there instead of walking every
	// tile the flight has uploaded so far (a claim's cost would grow with
	// the flight). Tiles behind it may be free again (a failed batch's,
	// say): a caller claims once without After before it concludes that
	// nothing is left.
	After Cursor
	// Stream, when not 0, is the strict client sequence (SequenceStream)
	// the batch is bound to: it gets the stream's last committed number
	// + 1, journaled with it. When another open batch holds that number
	// the claim changes nothing and returns a *SequenceBusyError.
	Stream int64
	// OpID is the operation ID of the batch the claim forms: the claim
	// marks its candidates with it as it locks them, and Pick's batch must
	// carry it.
	OpID string
	// Pick runs inside the claim's transaction with the candidates in
	// Order. It returns the batch to journal (no tiles: none) and
	// the candidates rejected without being sent (too large, say); the
	// others are left for a later claim. It must not block: the
	// candidates' rows are locked while it runs. It runs at most once, on
	// ClaimBatch's goroutine.
	Pick func(candidates []Tile) (Batch, []Rejection)
	// At, if set, is called once the claim has a connection, right before
	// its statement is sent; what it returns replaces After. Without a
	// Stream the claim's transaction begins in the same round trip as its
	// statement; with one it has begun, and locked the stream, by then.
	// Callers whose claims take turns (one reads the cursor the last one's
	// Pick moved) take their turn there, so that no turn waits for a
	// pooled connection or for a round trip of its own for the BEGIN. It
	// is called at most once, on ClaimBatch's goroutine.
	At func() Cursor
	// Sending says the caller sends the batch as soon as the claim has
	// committed: the journal counts that first send with the batch
	// (Batch.Sends 1), and the caller does not note it (NoteSend), which
	// keeps a round trip off the way to the wire. NoteSend's check that
	// the batch is still open and this run's adds nothing there: the claim
	// has just made it so, under a fresh lease. A batch the run does not
	// send after all (it stopped first) keeps the count of a send it did
	// not make; TrimUnsentBatch, which says nothing was sent, clears it.
	Sending bool
}

// Claimed is what ClaimBatch took.
type Claimed struct {
	Batch      Batch       // OpID "" when no batch was formed
	Tiles      []Tile      // the batch's members, in its order
	Rejections []Rejection // recorded in the same transaction
	Candidates int         // rows locked and marked (those Pick left, unmarked again); 0 means nothing is left to claim now
	// Last is the last candidate (in the claim's Order) that the batch
	// took or Pick rejected: the After of the caller's next claim. Zero
	// when Pick took none.
	Last Cursor
	// Left counts the candidates Pick left for a later claim (over the
	// batch's byte limit). They come right after Last: a claim after Last
	// finds them, one after a cursor another worker moved further does not.
	Left int
}

// claimSQL locks the next uploadable tiles of the flight that are in no
// open batch, are not excluded ($4) and, with a budget ($3 > 0), have
// attempts left counting the uncounted rejections (read through their
// small partial index; a candidate's are read only when the claim, which
// looks once, finds any at all: they are few and short-lived, the next
// count takes them, and most claims find none). SKIP LOCKED lets concurrent claims take different
// tiles without waiting; a tile another claim took and committed meanwhile
// fails the recheck of open_op_id on its new version. Tiles awaiting a
// lookup (members of a failed batch of the flight, or rejected with
// ReasonProtocolError) are left out unless the caller found them not held
// ($5). The set is read once per claim (a hashed subplan) through two
// small indexes: the flight's failed batches (0009) and the unclear
// rejections (0017), so with none a claim pays two empty index probes,
// and the candidates are still read in the claim's order, from
// after the caller's cursor ($7, $9), through the partial index that
// serves that order.
//
// What the order promises. A claim takes the first tiles, in (z, tile_id)
// order under OrderZoom, that it may claim at its snapshot, after its
// cursor: so each zoom level is claimed before the next, whichever
// process claims (the claims of a flight advance together: a tile another
// claim skipped as locked is that claim's), and a batch straddles two
// zooms only at the boundary. "May claim" is the whole of the rule;
// nothing waits:
//   - A tile in another open batch is in flight, not claimable: zoom z+1
//     goes out while zoom z's last batches are still on the wire.
//   - A tile that comes back pending comes back at its place in the order.
//     A failed batch's members await a lookup and no run may claim them
//     until its own lookup finds them not held; the run whose batch failed
//     ends, and the next run's call looks them up and starts from the
//     flight's first tile (no cursor), so they go before any further tile
//     of a higher zoom it claims (a lookup in the middle of a call sends
//     the call's cursor back to the first tile too). A rejected tile waits
//     for the count of its rejection (Exclude, the call's) and goes first
//     in the next call the same way, if its budget allows.
//   - A given-up tile is never claimed and holds nothing back; requeued,
//     it is pending again at its place.
//   - A cursor does not look behind itself: walking back over every
//     settled tile's index entry on each claim would make a claim's cost
//     grow with the flight. A tile freed behind a run's cursor by another
//     run (a rejection with attempts left, a requeue) is claimed by that
//     run's next claim from the first tile: its rescan before it concludes
//     nothing is left, or its next call. The other run's own next call
//     claims it first in any case.
func claimSQL(o Order) string {
	cursor, orderBy := o.claimOrderSQL()
	return `SELECT t.tile_id FROM tiles t
	WHERE t.flight_id = $1 AND t.voting_status IN ('pending', 'trusted') AND t.open_op_id IS NULL
	  AND NOT t.tile_id = ANY($4::text[])
	  AND ((t.tile_id = ANY($5::text[])
	        AND NOT EXISTS (SELECT 1 FROM upload_batches b WHERE b.flight_id = $1 AND b.state = 'failed'
	                          AND b.settled_at >= $6 AND t.tile_id = ANY(b.tile_ids))
	        AND NOT EXISTS (SELECT 1 FROM upload_rejections r WHERE r.tile_id = t.tile_id
	                          AND r.reason = '` + ReasonProtocolError + `' AND r.rejected_at >= $6))
	       OR t.tile_id NOT IN (
	        SELECT unnest(b.tile_ids) FROM upload_batches b WHERE b.flight_id = $1 AND b.state = 'failed'
	        UNION ALL
	        SELECT r.tile_id FROM upload_rejections r WHERE r.reason = '` + ReasonProtocolError + `'))
	  AND ` + cursor + `
	  AND ($3::int <= 0 OR t.upload_attempts - t.budget_base
	        + CASE WHEN EXISTS (SELECT 1 FROM upload_rejections r WHERE r.counted_at IS NULL)
	               THEN (SELECT count(*) FROM upload_rejections r WHERE r.tile_id = t.tile_id AND r.counted_at IS NULL)
	               ELSE 0 END < $3::int)
	ORDER BY ` + orderBy + ` LIMIT $2
	FOR UPDATE OF t SKIP LOCKED`
}

// claimMarkSQL locks claimSQL's candidates and marks them as members of
// the batch being formed ($8) in the same statement (one round trip). The
// candidates Pick leaves out are unmarked before the commit. The marked
// rows come back in the claim's order.
//
// The mark finds the candidates again by key, through the primary key,
// not by the ctid c read: a candidate another transaction changed and
// committed after this statement's snapshot is locked in its newest
// version, which the snapshot does not see, so a write by ctid would
// skip it: locked and counted toward the limit, yet neither marked nor
// returned (TestAClaimMarksEveryCandidateItLockedThatChangedMeanwhile).
// By key, the update meets the version its snapshot sees and follows it
// to the newest one, which this claim holds.
var claimMarkSQL = map[Order]string{OrderZoom: claimMarkSQLFor(OrderZoom), OrderID: claimMarkSQLFor(OrderID)}

func claimMarkSQLFor(o Order) string {
	_, orderBy := o.claimOrderSQL()
	return `WITH c AS (` + claimSQL(o) + `),
	marked AS (UPDATE tiles t SET open_op_id = $8 WHERE t.tile_id = ANY(ARRAY(SELECT tile_id FROM c)) RETURNING ` + tileColumns + `)
	SELECT ` + tileColumns + ` FROM marked t ORDER BY ` + orderBy
}

// unpicked lists the candidates that are not members.
func unpicked(cands []Tile, members []string) []string {
	in := make(map[string]bool, len(members))
	for _, id := range members {
		in[id] = true
	}
	var left []string
	for _, t := range cands {
		if !in[t.ID] {
			left = append(left, t.ID)
		}
	}
	return left
}

// ClaimBatch claims the flight's next tiles for this Store's run in one
// transaction: one statement locks up to c.Limit free candidates (SELECT
// ... FOR UPDATE SKIP LOCKED) and marks them as in the batch c.OpID; then
// c.Pick chooses, its rejections are recorded, the batch is journaled with
// this run as owner and a fresh lease, and the candidates Pick left are
// unmarked. The commit waits for the disk: the batch is journaled before
// its first byte is sent.
func (s *Store) ClaimBatch(ctx context.Context, c Claim) (Claimed, error) {
	if err := ValidateFlightID(c.FlightID); err != nil {
		return Claimed{}, err
	}
	if c.Limit < 1 || c.Pick == nil || c.OpID == "" {
		return Claimed{}, fmt.Errorf("claim a batch of flight %s: limit must be positive, and Pick and OpID set", c.FlightID)
	}
	var out Claimed
	var err error
	if c.Stream != 0 {
		err = pgx.BeginTxFunc(ctx, s.pool, claimTx, func(tx pgx.Tx) error {
			// First, so that two claims of one stream queue here before
			// either locks a tile.
			st, busy, err := s.lockStream(ctx, tx, c.Stream)
			if err != nil {
				return err
			}
			if busy != nil {
				return busy
			}
			out, err = s.claimIn(ctx, tx, c, st, false)
			return err
		})
	} else {
		out, err = s.claimPipelined(ctx, c)
	}
	if err != nil {
		return Claimed{}, fmt.Errorf("claim a batch of flight %s: %w", c.FlightID, err)
	}
	return out, nil
}

// claimPipelined is a claim without a stream, on a pooled connection of
// its own: its transaction's BEGIN goes in one round trip with the claim's
// statement, and its COMMIT in one with the journal's writes: two round
// trips, and the turn (Claim.At) spans one, since the BEGIN is not a
// round trip the next claim's turn waits for. The COMMIT returns once the
// batch's journal is on disk.
func (s *Store) claimPipelined(ctx context.Context, c Claim) (Claimed, error) {
	var out Claimed
	err := s.onConn(ctx, func(conn *pgx.Conn) (err error) {
		out, err = s.claimIn(ctx, conn, c, Stream{}, true)
		return err
	})
	if err != nil {
		return Claimed{}, err
	}
	return out, nil
}

// claimQuerier is what a claim runs its statements on: a transaction
// (pgx.Tx), or a connection whose transaction the claim begins and
// commits itself in its own round trips (claimPipelined).
type claimQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// claimIn runs ClaimBatch's claim on q, in the stream seq (zero: none).
// pipelined says q is a connection outside a transaction: the claim's
// statement goes after claimBegin in one round trip, and its journal's
// writes before a COMMIT in another.
func (s *Store) claimIn(ctx context.Context, q claimQuerier, c Claim, seq Stream, pipelined bool) (Claimed, error) {
	var out Claimed
	exclude := c.Exclude
	if exclude == nil {
		exclude = []string{}
	}
	lookedUp := c.LookedUp
	if lookedUp == nil {
		lookedUp = []string{}
	}
	order, err := ParseOrder(string(c.Order))
	if err != nil {
		return out, err
	}
	after := c.After
	if c.At != nil {
		after = c.At()
	}
	args := []any{c.FlightID, c.Limit, c.MaxAttempts, exclude, lookedUp, c.LookedUpAt, after.ID, c.OpID}
	if order == OrderZoom {
		afterZ := -1 // before zoom 0: the zero cursor
		if !after.IsZero() {
			afterZ = after.Z
		}
		args = append(args, afterZ)
	}
	var cands []Tile
	if pipelined {
		err = claimBegin.first(ctx, q, func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err == nil {
				cands, err = collectTiles(rows, c.Limit)
			}
			return err
		}, claimMarkSQL[order], args...)
	} else {
		var rows pgx.Rows
		if rows, err = q.Query(ctx, claimMarkSQL[order], args...); err == nil {
			cands, err = collectTiles(rows, c.Limit)
		}
	}
	if err != nil {
		return out, err
	}
	out.Candidates = len(cands)
	if len(cands) == 0 {
		if pipelined {
			err = commit(ctx, q)
		}
		return out, err
	}
	b, rejs := c.Pick(cands)
	byID := make(map[string]Tile, len(cands))
	for _, t := range cands {
		byID[t.ID] = t
	}
	taken := map[string]bool{}
	for _, r := range rejs {
		if _, ok := byID[r.TileID]; !ok || taken[r.TileID] {
			return out, fmt.Errorf("pick rejected tile %s, which is not a candidate or is named twice", r.TileID)
		}
		taken[r.TileID] = true
	}
	if len(b.TileIDs) > 0 {
		if b.OpID != c.OpID {
			return out, fmt.Errorf("pick formed batch %s, but the claim marked its tiles for %s", b.OpID, c.OpID)
		}
		b.FlightID = c.FlightID
		if seq.ID != 0 {
			b.ClientID, b.ClientSeq = seq.ClientID, seq.LastCommitted+1
		}
		if err := validateBatch(b); err != nil {
			return out, err
		}
		for _, id := range b.TileIDs {
			t, ok := byID[id]
			if !ok || taken[id] {
				return out, fmt.Errorf("pick put tile %s in the batch, but it is not a candidate or is also rejected", id)
			}
			out.Tiles = append(out.Tiles, t)
		}
	}
	// The journal writes go as one pipelined round trip (with the commit,
	// when pipelined).
	w := &pgx.Batch{}
	if err := queueRejections(w, rejs); err != nil {
		return out, err
	}
	if len(b.TileIDs) > 0 {
		s.queueBatch(w, b, c.Sending)
		if seq.ID != 0 {
			w.Queue(`UPDATE upload_batches SET client_stream = $2, client_seq = $3 WHERE op_id = $1`,
				b.OpID, seq.ID, int64(b.ClientSeq))
		}
	}
	if left := unpicked(cands, b.TileIDs); len(left) > 0 {
		w.Queue(freeTilesSQL, left, c.OpID)
	}
	if pipelined {
		queueCommit(w)
	}
	if w.Len() > 0 {
		if err := q.SendBatch(ctx, w).Close(); err != nil {
			return out, fmt.Errorf("journal batch %s (%d tiles, %d rejection(s)): %w", b.OpID, len(b.TileIDs), len(rejs), err)
		}
	}
	out.Rejections = rejs
	out.Left = len(cands) - len(b.TileIDs) - len(rejs)
	out.Last = lastTaken(cands, b.TileIDs, rejs)
	if len(b.TileIDs) > 0 {
		out.Batch = b
	}
	return out, nil
}

// collectTiles scans a claim's rows (the statement's LIMIT bounds them;
// limit sizes the slice).
func collectTiles(rows pgx.Rows, limit int) ([]Tile, error) {
	return pgx.AppendRows(make([]Tile, 0, min(limit, 1024)), rows, func(r pgx.CollectableRow) (Tile, error) { return scanTile(r) })
}

// freeTilesSQL frees the tiles $1 that the batch $2 still marks.
const freeTilesSQL = `UPDATE tiles SET open_op_id = NULL WHERE tile_id = ANY($1) AND open_op_id = $2`

// queueBatch queues the journaling of b as this run's, with a fresh lease,
// counting its first send when sending (Claim.Sending).
func (s *Store) queueBatch(w *pgx.Batch, b Batch, sending bool) {
	sends := 0
	if sending {
		sends = 1
	}
	w.Queue(`INSERT INTO upload_batches (op_id, flight_id, fingerprint, tile_ids, sha256s,
		owner_run, owner_host, owner_pid, lease_expires_at, sends)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9::float8), $10)`,
		b.OpID, b.FlightID, b.Fingerprint, b.TileIDs, b.SHA256s, s.run.ID, s.run.Host, s.run.PID, s.leaseSecs(), sends)
}

// insertRejections records rs in tx; queueRejections queues the same.
func insertRejections(ctx context.Context, tx pgx.Tx, rs []Rejection) error {
	w := &pgx.Batch{}
	if err := queueRejections(w, rs); err != nil || w.Len() == 0 {
		return err
	}
	if err := tx.SendBatch(ctx, w).Close(); err != nil {
		return fmt.Errorf("record %d rejection(s): %w", len(rs), err)
	}
	return nil
}

func queueRejections(w *pgx.Batch, rs []Rejection) error {
	if len(rs) == 0 {
		return nil
	}
	ops, ids, reasons, messages := make([]string, len(rs)), make([]string, len(rs)), make([]string, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		if err := validateRejection(r); err != nil {
			return err
		}
		ops[i], ids[i], reasons[i], messages[i] = r.OpID, r.TileID, r.Reason, r.Message
	}
	w.Queue(`INSERT INTO upload_rejections (op_id, tile_id, reason, message)
		SELECT u.op_id, u.tile_id, u.reason, nullif(u.message, '')
		  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(op_id, tile_id, reason, message)
		ON CONFLICT (op_id, tile_id) DO NOTHING`, ops, ids, reasons, messages)
	return nil
}

// ErrNotOwner says a batch belongs to another run now (its lease expired
// and another run took it over), so this run must not send it.
var ErrNotOwner = errors.New("upload batch is owned by another run")

// TrimUnsentBatch replaces the members of a batch this run claimed and has
// not sent yet with b's (a subset, with its own fingerprint), records rs
// (the members dropped after local checks) and frees the dropped tiles. No
// member left fails the batch. Nothing was sent under the key, so nothing
// the provider holds can refer to the old members, and its count of sends
// is 0 again (see Claim.Sending).
func (s *Store) TrimUnsentBatch(ctx context.Context, b Batch, rs []Rejection) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var state string
		var owner *string
		var members []string
		err := tx.QueryRow(ctx, `SELECT state, owner_run, tile_ids FROM upload_batches WHERE op_id = $1 FOR UPDATE`,
			b.OpID).Scan(&state, &owner, &members)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return ErrBatchNotFound
		case err != nil:
			return err
		case state != "open":
			return ErrBatchNotOpen
		case owner == nil || *owner != s.run.ID:
			return ErrNotOwner
		}
		for _, id := range b.TileIDs {
			if !slices.Contains(members, id) {
				return fmt.Errorf("tile %s is not a member", id)
			}
		}
		if err := insertRejections(ctx, tx, rs); err != nil {
			return err
		}
		if len(b.TileIDs) == 0 {
			_, err = tx.Exec(ctx, `UPDATE upload_batches SET state = 'failed', settled_at = now(),
				detail = 'no member passed the local checks; nothing was sent' WHERE op_id = $1`, b.OpID)
		} else {
			if err := validateBatch(b); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE upload_batches SET tile_ids = $2, sha256s = $3, fingerprint = $4, sends = 0 WHERE op_id = $1`,
				b.OpID, b.TileIDs, b.SHA256s, b.Fingerprint)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE tiles SET open_op_id = NULL WHERE tile_id = ANY($1) AND NOT tile_id = ANY($2) AND open_op_id = $3`,
			members, b.TileIDs, b.OpID)
		return err
	})
	if err != nil {
		return fmt.Errorf("trim unsent batch %s: %w", b.OpID, err)
	}
	return nil
}

// AdoptOpenBatches takes over the flight's open batches that this run may
// settle: its own, those whose lease expired (or that have none: they
// were journaled before leases existed), and those of the runs in dead,
// runs of this host that RunLocks.State proved dead, whatever their
// lease. Each is re-leased to this run in the same statement; batches
// another process is adopting right now are skipped (SKIP LOCKED), so two
// runs never adopt the same batch. A live owner's batch is never returned.
// Oldest first.
func (s *Store) AdoptOpenBatches(ctx context.Context, flightID string, dead []string) ([]Batch, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, err
	}
	if dead == nil {
		dead = []string{}
	}
	rows, err := s.pool.Query(ctx, `UPDATE upload_batches b
		SET owner_run = $2, owner_host = $3, owner_pid = $4, lease_expires_at = now() + make_interval(secs => $5::float8)
		WHERE b.op_id IN (SELECT op_id FROM upload_batches
			WHERE flight_id = $1 AND state = 'open'
			  AND (owner_run = $2 OR lease_expires_at IS NULL OR lease_expires_at <= now()
			       OR (owner_run = ANY($6) AND owner_host = $3))
			ORDER BY created_at, op_id FOR UPDATE SKIP LOCKED)
		RETURNING op_id, flight_id, fingerprint, tile_ids, sha256s, sends, created_at,
			coalesce((SELECT client_id FROM upload_client_sequences WHERE id = b.client_stream), ''), coalesce(client_seq, 0),
			`+notBeforeCols,
		flightID, s.run.ID, s.run.Host, s.run.PID, s.leaseSecs(), dead)
	if err != nil {
		return nil, fmt.Errorf("adopt open batches of flight %s: %w", flightID, err)
	}
	bs, err := pgx.CollectRows(rows, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("adopt open batches of flight %s: %w", flightID, err)
	}
	sort.Slice(bs, func(i, j int) bool {
		if !bs[i].CreatedAt.Equal(bs[j].CreatedAt) {
			return bs[i].CreatedAt.Before(bs[j].CreatedAt)
		}
		return bs[i].OpID < bs[j].OpID
	})
	return bs, nil
}

// ExtendLeases renews the lease of every open batch of this run, in one
// statement, and returns how many it renewed. A run calls it while it works
// (every third of its lease) so that no other run takes its batches.
func (s *Store) ExtendLeases(ctx context.Context) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE upload_batches SET lease_expires_at = now() + make_interval(secs => $2::float8)
		WHERE owner_run = $1 AND state = 'open'`, s.run.ID, s.leaseSecs())
	if err != nil {
		return 0, fmt.Errorf("extend the leases of run %s: %w", s.run.ID, err)
	}
	return int(tag.RowsAffected()), nil
}

// ReleaseLeases ends the lease of every open batch of this run now, so the
// next run (of any process) settles what this one leaves open without
// waiting for the lease to run out.
func (s *Store) ReleaseLeases(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `UPDATE upload_batches SET lease_expires_at = now()
		WHERE owner_run = $1 AND state = 'open'`, s.run.ID)
	if err != nil {
		return fmt.Errorf("release the leases of run %s: %w", s.run.ID, err)
	}
	return nil
}

// Lease is one run's open batches of one flight.
type Lease struct {
	FlightID  string
	RunID     string // "" for batches journaled before leases existed
	Host      string
	PID       int
	Batches   int
	Tiles     int
	ExpiresAt *time.Time // the latest lease of the run's batches; nil when none has one
	Expired   bool       // by the database's clock: another run may settle them
	// WaitingBatches and WaitingTiles are the part of Batches and Tiles
	// whose provider-advised time (not_before) has not come by the
	// database's clock: no run sends them before it. WaitingUntil is the
	// earliest of those times, when the first of them may go (nil when
	// none waits).
	WaitingBatches int
	WaitingTiles   int
	WaitingUntil   *time.Time
}

// Leases lists who holds open batches of a flight ("" for every flight),
// by flight and then by when the lease ends.
func (s *Store) Leases(ctx context.Context, flightID string) ([]Lease, error) {
	if flightID != "" {
		if err := ValidateFlightID(flightID); err != nil {
			return nil, err
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT flight_id, coalesce(owner_run, ''), coalesce(owner_host, ''), coalesce(owner_pid, 0),
			count(*)::int, sum(cardinality(tile_ids))::int, max(lease_expires_at),
			coalesce(max(lease_expires_at) <= now(), true),
			(count(*) FILTER (WHERE not_before > now()))::int,
			coalesce(sum(cardinality(tile_ids)) FILTER (WHERE not_before > now()), 0)::int,
			min(not_before) FILTER (WHERE not_before > now())
		FROM upload_batches WHERE state = 'open' AND ($1 = '' OR flight_id = $1)
		GROUP BY 1, 2, 3, 4 ORDER BY 1, 7 NULLS FIRST, 2`, flightID)
	if err != nil {
		return nil, fmt.Errorf("list leases of open batches: %w", err)
	}
	ls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lease, error) {
		var l Lease
		err := r.Scan(&l.FlightID, &l.RunID, &l.Host, &l.PID, &l.Batches, &l.Tiles, &l.ExpiresAt, &l.Expired,
			&l.WaitingBatches, &l.WaitingTiles, &l.WaitingUntil)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list leases of open batches: %w", err)
	}
	return ls, nil
}
