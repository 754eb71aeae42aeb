-- 0012: a claim marks its tiles (tiles.open_op_id, the open batch's op_id).
--
-- A claim that only locked its tiles' rows and checked them against the
-- open batches would have to drop a tile that another claim journaled
-- after its snapshot, and would hold that row lock until its own commit,
-- making the other batch's settlement wait behind it. A written mark is
-- seen by a concurrent claim's recheck of the row, so that claim skips the
-- tile and goes on to the next one in the same statement. The marks start
-- from the open batches.
ALTER TABLE tiles ADD COLUMN open_op_id TEXT;
UPDATE tiles t SET open_op_id = b.op_id
  FROM upload_batches b CROSS JOIN LATERAL unnest(b.tile_ids) AS m(tile_id)
 WHERE b.state = 'open' AND t.tile_id = m.tile_id;
