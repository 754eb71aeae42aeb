package tilestore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

func validateRejection(r Rejection) error {
	if r.OpID == "" {
		return fmt.Errorf("rejection of tile %s has no operation ID", r.TileID)
	}
	if err := ValidateTileID(r.TileID); err != nil {
		return err
	}
	if r.Reason == "" {
		return fmt.Errorf("rejection of tile %s in %s has no reason", r.TileID, r.OpID)
	}
	if err := storableText(r.Reason, r.Message); err != nil {
		return fmt.Errorf("rejection of tile %s in %s: %w", r.TileID, r.OpID, err)
	}
	return nil
}

// storableText refuses what Postgres refuses in a text column, so the
// caller learns it before a transaction fails on it.
func storableText(texts ...string) error {
	for _, s := range texts {
		if strings.ContainsRune(s, 0) {
			return fmt.Errorf("text %q contains a NUL byte", s)
		}
		if !utf8.ValidString(s) {
			return fmt.Errorf("text %q is not valid UTF-8", strings.ToValidUTF8(s, "\uFFFD"))
		}
	}
	return nil
}

// Validate reports what SettleBatch refuses before it reads the batch: an
// empty operation ID, a malformed tile ID, a rejection of another
// operation or without a reason, text Postgres cannot store. A settlement
// built from any provider answer must pass it, or the batch could never
// settle.
func (st Settlement) Validate() error {
	if st.OpID == "" {
		return errors.New("operation ID is empty")
	}
	if err := validateTileIDs(st.Uploaded); err != nil {
		return err
	}
	for _, r := range st.Rejections {
		if r.OpID == "" {
			r.OpID = st.OpID
		}
		if r.OpID != st.OpID {
			return fmt.Errorf("rejection of tile %s belongs to operation %s", r.TileID, r.OpID)
		}
		if err := validateRejection(r); err != nil {
			return err
		}
	}
	if err := storableText(st.Detail); err != nil {
		return fmt.Errorf("detail: %w", err)
	}
	return nil
}

// SettleBatch applies a batch's answer in one transaction: its Uploaded
// tiles become uploaded, its Rejections are recorded (a rejection already
// recorded is ignored), and the batch becomes settled with its HTTP status.
// Settling a settled batch is a no-op, so a crash between the answer and
// the commit is repaired by settling again. A sequenced batch's number
// becomes its stream's last committed in the same transaction. A settlement that names tiles
// outside the batch changes nothing and returns a *NonMemberError; one for
// a failed batch returns ErrBatchNotOpen; an unknown batch ErrBatchNotFound.
// Without rejections its commit does not wait for the disk (see
// settleRelaxedBegin): a settlement lost in a crash leaves the batch open, to be
// settled again; SyncJournal makes it durable at the end of a run.
func (s *Store) SettleBatch(ctx context.Context, st Settlement) error {
	if st.OpID == "" {
		return errors.New("settle batch: operation ID is empty")
	}
	if err := st.Validate(); err != nil {
		return fmt.Errorf("settle batch %s: %w", st.OpID, err)
	}
	rejIDs := make([]string, len(st.Rejections))
	reasons := make([]string, len(st.Rejections))
	messages := make([]string, len(st.Rejections))
	for i, r := range st.Rejections {
		rejIDs[i], reasons[i], messages[i] = r.TileID, r.Reason, r.Message
	}

	// Relaxed durability: a settlement lost in a crash leaves the batch open,
	// and the next run settles it again from the provider's replay. Not when
	// it records rejections: CountRejectionsUpTo may write a durable give-up
	// record from them before its own commit, and a recount after a crash
	// must find the same rejections, not whatever a later answer says.
	begin := settleRelaxedBegin
	if len(st.Rejections) > 0 {
		begin = settleDurableBegin
	}
	// The transaction's BEGIN goes in the round trip of its first read,
	// and its COMMIT in that of its writes: two round trips.
	if err := s.onConn(ctx, func(conn *pgx.Conn) error {
		return settleOn(ctx, conn, begin, st, rejIDs, reasons, messages)
	}); err != nil {
		return fmt.Errorf("settle batch %s: %w", st.OpID, err)
	}
	return nil
}

// settleOn is SettleBatch's transaction on conn, begun with begin.
func settleOn(ctx context.Context, conn *pgx.Conn, begin txBegin, st Settlement, rejIDs, reasons, messages []string) error {
	var state string
	var members []string
	var stream *int64
	err := begin.first(ctx, conn, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(&state, &members, &stream)
	}, `SELECT state, tile_ids, client_stream FROM upload_batches WHERE op_id = $1 FOR UPDATE`, st.OpID)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrBatchNotFound
	}
	if err != nil {
		return err
	}
	switch state {
	case "settled":
		return commit(ctx, conn)
	case "failed":
		return fmt.Errorf("it failed earlier: %w", ErrBatchNotOpen)
	}
	up, err := checkMembers(st.OpID, members, st.Uploaded, rejIDs)
	if err != nil {
		return err
	}
	// The writes go as one pipelined round trip, with the commit. Each
	// member's row is written once: marked uploaded and freed in one
	// statement. A failed write aborts the transaction: the COMMIT after
	// it does not run.
	w := &pgx.Batch{}
	if stream != nil {
		// A 2xx commits a sequenced batch's number (migration 0010).
		w.Queue(advanceStreamSQL, st.OpID) // before the batch below stops being open
	}
	if flags := uploadedFlags(members, up); flags == nil {
		w.Queue(settleAllTilesSQL, st.OpID, members)
	} else {
		w.Queue(settleTilesSQL, flags, st.OpID, members)
	}
	if len(rejIDs) > 0 {
		w.Queue(`INSERT INTO upload_rejections (op_id, tile_id, reason, message)
		SELECT $1, u.tile_id, u.reason, nullif(u.message, '')
		  FROM unnest($2::text[], $3::text[], $4::text[]) AS u(tile_id, reason, message)
		ON CONFLICT (op_id, tile_id) DO NOTHING`, st.OpID, rejIDs, reasons, messages)
	}
	w.Queue(`UPDATE upload_batches
		SET state = 'settled', settled_at = now(), http_status = nullif($2::int, 0), detail = nullif($3, '')
		WHERE op_id = $1`, st.OpID, st.HTTPStatus, st.Detail)
	queueCommit(w)
	if err := conn.SendBatch(ctx, w).Close(); err != nil {
		return fmt.Errorf("mark %d uploaded, record %d rejection(s): %w", len(st.Uploaded), len(rejIDs), err)
	}
	return nil
}

// settleTilesSQL marks a settled batch's members ($3) that were uploaded
// ($1, true at a member's index) uploaded and frees those it still holds
// ($2), writing each row once (two statements wrote an uploaded tile's row
// twice per settlement). The members are found through the primary key
// (t.tile_id = ANY($3), in a transaction without sequential scans: see
// settleRelaxedBegin).
const settleTilesSQL = `
UPDATE tiles t
   SET voting_status = CASE WHEN m.up AND t.voting_status <> 'uploaded' THEN 'uploaded' ELSE t.voting_status END,
       uploaded_at = CASE WHEN m.up AND t.voting_status <> 'uploaded' THEN coalesce(t.uploaded_at, now()) ELSE t.uploaded_at END,
       open_op_id = CASE WHEN t.open_op_id = $2 THEN NULL ELSE t.open_op_id END
  FROM unnest($3::text[], $1::bool[]) AS m(id, up)
 WHERE t.tile_id = ANY($3::text[]) AND t.tile_id = m.id
   AND ((m.up AND t.voting_status <> 'uploaded') OR t.open_op_id = $2)`

// settleAllTilesSQL is settleTilesSQL for a batch whose members ($2) were
// all uploaded, the common answer: the same writes, without joining each
// member to its flag.
const settleAllTilesSQL = `
UPDATE tiles t
   SET voting_status = 'uploaded',
       uploaded_at = CASE WHEN t.voting_status <> 'uploaded' THEN coalesce(t.uploaded_at, now()) ELSE t.uploaded_at END,
       open_op_id = CASE WHEN t.open_op_id = $1 THEN NULL ELSE t.open_op_id END
 WHERE t.tile_id = ANY($2::text[])
   AND (t.voting_status <> 'uploaded' OR t.open_op_id = $1)`

// uploadedFlags says, for each member, whether it is in up; nil when all
// are.
func uploadedFlags(members []string, up map[string]bool) []bool {
	all := true
	for _, id := range members {
		all = all && up[id]
	}
	if all {
		return nil
	}
	flags := make([]bool, len(members))
	for i, id := range members {
		flags[i] = up[id]
	}
	return flags
}

// checkMembers refuses a settlement that names a tile outside the batch, or
// names one tile as both uploaded and rejected. It returns the uploaded
// tiles as a set.
func checkMembers(opID string, members, uploaded, rejected []string) (map[string]bool, error) {
	in := make(map[string]bool, len(members))
	for _, m := range members {
		in[m] = true
	}
	var outside []string
	up := make(map[string]bool, len(uploaded))
	for _, id := range uploaded {
		up[id] = true
		if !in[id] {
			outside = append(outside, id)
		}
	}
	for _, id := range rejected {
		if up[id] {
			return nil, fmt.Errorf("tile %s is both uploaded and rejected in one answer", id)
		}
		if !in[id] {
			outside = append(outside, id)
		}
	}
	if len(outside) > 0 {
		sort.Strings(outside)
		return nil, &NonMemberError{OpID: opID, IDs: outside}
	}
	return up, nil
}
