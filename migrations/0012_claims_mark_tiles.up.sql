-- 0012: claims mark their tiles again (undoes 0011).
--
-- With 0011 a claim only locked its tiles' rows and checked them against
-- the open batches with a second snapshot. A claim that locked a tile
-- another claim had journaled after its first snapshot had to drop it,
-- and held its row lock until its own commit, which made that batch's
-- settlement wait: BenchmarkClaimBatch (8 runs on one flight) fell from
-- 592 to 39 claims/s and BenchmarkScaleOut/procs=1 from 645 to 551 tiles/s.
-- A written mark is seen by a concurrent claim's recheck of the row, so
-- the claim skips the tile and goes on to the next one in the same
-- statement. As 0007 made it, from the open batches.
ALTER TABLE tiles ADD COLUMN open_op_id TEXT;
UPDATE tiles t SET open_op_id = b.op_id
  FROM upload_batches b CROSS JOIN LATERAL unnest(b.tile_ids) AS m(tile_id)
 WHERE b.state = 'open' AND t.tile_id = m.tile_id;
