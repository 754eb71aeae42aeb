-- 0007: batch claims with leases, so many upload-pending processes (on one
-- machine or many) share a flight through this database.
--
-- A batch now names its owner (run ID, host, pid) and a lease the owner
-- extends while it works. Another process settles an open batch only when
-- its lease has expired (or it has none: a batch journaled before this
-- migration), with the same key and the same members.
ALTER TABLE upload_batches ADD COLUMN owner_run TEXT;
ALTER TABLE upload_batches ADD COLUMN owner_host TEXT;
ALTER TABLE upload_batches ADD COLUMN owner_pid INTEGER;
ALTER TABLE upload_batches ADD COLUMN lease_expires_at TIMESTAMPTZ;
-- Heartbeats extend every open batch of one run in one statement.
CREATE INDEX upload_batches_owner_open_idx ON upload_batches (owner_run) WHERE state = 'open';

-- The open batch a tile is in, if any. One column per tile makes "a tile is
-- in at most one open batch" structural, and lets a claim that skipped a
-- locked row see (on Postgres' recheck of the updated row) that the tile
-- was claimed meanwhile. Not indexed: updates stay HOT (see 0004).
ALTER TABLE tiles ADD COLUMN open_op_id TEXT;
UPDATE tiles t SET open_op_id = b.op_id
  FROM upload_batches b CROSS JOIN LATERAL unnest(b.tile_ids) AS m(tile_id)
 WHERE b.state = 'open' AND t.tile_id = m.tile_id;
