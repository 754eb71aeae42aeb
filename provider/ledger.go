package provider

import (
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/operation"
)

// Ledger is GET /debug/ledger: everything a test or a chaos run needs to
// prove exactly-once storage.
type Ledger struct {
	Tiles      []LedgerTile      `json:"tiles"`
	Rejections []LedgerRejection `json:"rejections"`
	Ops        []LedgerOp        `json:"ops"`
	Faults     map[FaultKind]int `json:"faults"`
	FaultOps   []FaultEvent      `json:"fault_events"`
}

// LedgerTile is one stored tile and how many times its bytes were written.
type LedgerTile struct {
	FlightID   string    `json:"flight_id"`
	TileID     string    `json:"tile_id"`
	SHA256     string    `json:"sha256"`
	Size       int64     `json:"size"`
	ReceivedAt time.Time `json:"received_at"`
	Writes     int       `json:"writes"`
}

// LedgerRejection counts one tile's rejections for one reason in one op.
type LedgerRejection struct {
	OpID   string `json:"op_id"`
	TileID string `json:"tile_id"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// LedgerOp is one key and how many different fingerprints it came with.
type LedgerOp struct {
	Scope        string `json:"scope"`
	OpID         string `json:"op_id"`
	Fingerprints int    `json:"fingerprints"`
	Requests     int    `json:"requests"`
}

func (s *Server) ledger(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var l Ledger
	var err error
	collect := func(q string, fn func(pgx.CollectableRow) error) {
		if err != nil {
			return
		}
		var rows pgx.Rows
		rows, err = s.pool.Query(ctx, q)
		if err != nil {
			return
		}
		_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) { return struct{}{}, fn(row) })
	}
	collect(`SELECT t.flight_id, t.tile_id, t.sha256, t.size, t.received_at,
		(SELECT count(*) FROM provider_tile_writes w WHERE w.flight_id = t.flight_id AND w.tile_id = t.tile_id)
		FROM provider_tiles t ORDER BY t.flight_id, t.tile_id`, func(row pgx.CollectableRow) error {
		var t LedgerTile
		err := row.Scan(&t.FlightID, &t.TileID, &t.SHA256, &t.Size, &t.ReceivedAt, &t.Writes)
		l.Tiles = append(l.Tiles, t)
		return err
	})
	collect(`SELECT op_id, tile_id, reason, n FROM provider_rejections ORDER BY op_id, tile_id`, func(row pgx.CollectableRow) error {
		var x LedgerRejection
		err := row.Scan(&x.OpID, &x.TileID, &x.Reason, &x.Count)
		l.Rejections = append(l.Rejections, x)
		return err
	})
	collect(`SELECT scope, op_id, count(*), sum(requests) FROM provider_op_fingerprints GROUP BY scope, op_id ORDER BY op_id`,
		func(row pgx.CollectableRow) error {
			var o LedgerOp
			err := row.Scan(&o.Scope, &o.OpID, &o.Fingerprints, &o.Requests)
			l.Ops = append(l.Ops, o)
			return err
		})
	if err != nil {
		operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "ledger: "+err.Error(), nil, nil)
		return
	}
	l.Faults, l.FaultOps = s.faults.snapshot()
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) getTile(w http.ResponseWriter, r *http.Request) {
	f, t := r.PathValue("flight_id"), r.PathValue("tile_id")
	h, err := s.tiles.get(r.Context(), f, t)
	if errors.Is(err, errTileNotHeld) {
		operation.WriteError(w, http.StatusNotFound, operation.CodeTileNotFound, "no tile "+t+" in flight "+f, nil, nil)
		return
	}
	if err != nil {
		operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "tile lookup failed", nil, nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tile_id": t, "sha256": h.SHA256, "size": h.Size,
		"received_at": h.ReceivedAt.UTC().Format(time.RFC3339)})
}
