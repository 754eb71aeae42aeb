-- 0011 down: the per-tile mark of the open batch a tile is in, as 0007 made it.
-- Stop every upload-pending run first: a run started before this rollback
-- journals batches without the mark, and a run of the older binary would
-- take their tiles.
ALTER TABLE tiles ADD COLUMN open_op_id TEXT;
UPDATE tiles t SET open_op_id = b.op_id
  FROM upload_batches b CROSS JOIN LATERAL unnest(b.tile_ids) AS m(tile_id)
 WHERE b.state = 'open' AND t.tile_id = m.tile_id;
