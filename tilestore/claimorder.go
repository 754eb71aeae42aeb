package tilestore

import "fmt"

// Order is the order in which claims take a flight's tiles.
//
// OrderZoom (the default) sends the overview first: every claim takes the
// lowest (z, tile_id) among the tiles it may claim, so a flight's low zoom
// levels, a few percent of its tiles, reach the provider before the detail
// and a link cut halfway leaves the whole map at coarse zooms rather than
// half of it at every zoom. OrderID takes them by tile_id alone.
type Order string

const (
	OrderZoom Order = "zoom"
	OrderID   Order = "id"
)

// ParseOrder reads an order's name; "" is OrderZoom.
func ParseOrder(s string) (Order, error) {
	switch Order(s) {
	case "", OrderZoom:
		return OrderZoom, nil
	case OrderID:
		return OrderID, nil
	}
	return "", fmt.Errorf("unknown claim order %q: must be zoom or id", s)
}

// Cursor is a place in a flight's claim order: the tile a claim took last,
// and so where the next claim starts. The zero Cursor is before the first
// tile. Under OrderID only ID counts.
type Cursor struct {
	Z  int
	ID string
}

// IsZero reports whether c is before the first tile.
func (c Cursor) IsZero() bool { return c.ID == "" }

// CursorOf is the place of tile t.
func CursorOf(t Tile) Cursor { return Cursor{Z: t.Z, ID: t.ID} }

// Less reports whether a comes before b in o. Tile IDs compare byte by
// byte, as Postgres compares them (the "C" collation, migration 0013), so
// Less agrees with the claim's ORDER BY.
func (o Order) Less(a, b Cursor) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() && !b.IsZero()
	}
	if o != OrderID && a.Z != b.Z {
		return a.Z < b.Z
	}
	return a.ID < b.ID
}

// claimOrderSQL is the cursor condition and the ORDER BY of a claim in o:
// $7 is the cursor's tile ID, $9 its zoom. Each is served by its own
// partial index, whose leading columns they match: tiles_pending_idx
// (flight_id, tile_id) and tiles_claim_zoom_idx (flight_id, z, tile_id),
// so a claim reads the index from its cursor on, in order, and stops
// after its limit. The zero cursor's zoom is -1, before every tile.
func (o Order) claimOrderSQL() (cursor, orderBy string) {
	if o == OrderID {
		return `t.tile_id > $7`, `t.tile_id`
	}
	return `(t.z, t.tile_id) > ($9::smallint, $7::text)`, `t.z, t.tile_id`
}

// lastTaken is the place, in the claim's order, of the last candidate that
// Pick put in the batch or rejected: the cursor of the caller's next claim.
// cands are in claim order. The zero Cursor when Pick took none.
func lastTaken(cands []Tile, members []string, rs []Rejection) Cursor {
	taken := make(map[string]bool, len(members)+len(rs))
	for _, id := range members {
		taken[id] = true
	}
	for _, r := range rs {
		taken[r.TileID] = true
	}
	for i := len(cands) - 1; i >= 0; i-- {
		if taken[cands[i].ID] {
			return CursorOf(cands[i])
		}
	}
	return Cursor{}
}

// LastTaken is lastTaken for a caller's Pick, which must move its run's
// shared cursor before the claim commits (see uploader's claim turn).
func LastTaken(cands []Tile, b Batch, rs []Rejection) Cursor {
	return lastTaken(cands, b.TileIDs, rs)
}
