package chaos

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/fdr"
)

// giveUpKind is the FDR record kind of a give-up (retrydecorator).
const giveUpKind = "upload.giveup"

// clientTile is one tile as tilectl's database holds it.
type clientTile struct {
	ID       string
	SHA256   string
	Status   string
	Attempts int
	BlobPath string
}

// clientBatch is one row of tilectl's upload_batches journal.
type clientBatch struct {
	OpID        string
	Fingerprint string
	TileIDs     []string
	SHA256s     []string
	State       string
	HTTPStatus  *int32
	ClientSeq   *int64 // its Client-Sequence; nil for a batch sent without one
}

// clientRejection is one row of upload_rejections.
type clientRejection struct {
	OpID    string
	TileID  string
	Reason  string
	Counted bool
}

// clientView is everything the invariants read from tilectl's side.
type clientView struct {
	Tiles      map[string]clientTile
	Batches    []clientBatch
	Rejections []clientRejection
	GiveUpFDR  map[string]int // tile ID -> give-up records for this flight
}

func loadClientView(ctx context.Context, dbURL, fdrPath, flightID string) (clientView, error) {
	v := clientView{Tiles: map[string]clientTile{}, GiveUpFDR: map[string]int{}}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return v, fmt.Errorf("read tilectl's database: %w", err)
	}
	defer conn.Close(ctx)

	rows, _ := conn.Query(ctx, `SELECT tile_id, sha256, voting_status, upload_attempts, blob_path
		FROM tiles WHERE flight_id = $1`, flightID)
	var t clientTile
	if _, err := pgx.ForEachRow(rows, []any{&t.ID, &t.SHA256, &t.Status, &t.Attempts, &t.BlobPath}, func() error {
		v.Tiles[t.ID] = t
		return nil
	}); err != nil {
		return v, fmt.Errorf("read tiles of flight %s: %w", flightID, err)
	}

	rows, _ = conn.Query(ctx, `SELECT op_id, fingerprint, tile_ids, sha256s, state, http_status, client_seq
		FROM upload_batches WHERE flight_id = $1 ORDER BY created_at, op_id`, flightID)
	var b clientBatch
	if _, err := pgx.ForEachRow(rows, []any{&b.OpID, &b.Fingerprint, &b.TileIDs, &b.SHA256s, &b.State, &b.HTTPStatus, &b.ClientSeq}, func() error {
		v.Batches = append(v.Batches, b)
		b = clientBatch{}
		return nil
	}); err != nil {
		return v, fmt.Errorf("read upload batches of flight %s: %w", flightID, err)
	}

	rows, _ = conn.Query(ctx, `SELECT r.op_id, r.tile_id, r.reason, r.counted_at IS NOT NULL
		FROM upload_rejections r JOIN tiles t USING (tile_id) WHERE t.flight_id = $1`, flightID)
	var r clientRejection
	if _, err := pgx.ForEachRow(rows, []any{&r.OpID, &r.TileID, &r.Reason, &r.Counted}, func() error {
		v.Rejections = append(v.Rejections, r)
		return nil
	}); err != nil {
		return v, fmt.Errorf("read upload rejections of flight %s: %w", flightID, err)
	}

	recs, _, err := fdr.ReadFile(ctx, fdrPath)
	if err != nil {
		return v, fmt.Errorf("read FDR %s: %w", fdrPath, err)
	}
	for _, rec := range recs {
		if rec.Kind != giveUpKind {
			continue
		}
		var p struct {
			TileID   string `json:"tile_id"`
			FlightID string `json:"flight_id"`
		}
		if err := json.Unmarshal(rec.Payload, &p); err != nil {
			return v, fmt.Errorf("FDR record %d (%s): payload: %w", rec.Seq, rec.Kind, err)
		}
		if p.FlightID == flightID {
			v.GiveUpFDR[p.TileID]++
		}
	}
	return v, nil
}
