-- 0013: room on each tiles page for a claim's mark; tile IDs in byte order;
-- batch members stored uncompressed.
--
-- A claim writes each of its tiles once (open_op_id, no indexed column: a
-- HOT update, which touches no index, when the new row version fits on the
-- row's page). A batch's tiles sit on neighbouring pages, in the order
-- tiles import writes them, so a batch marks most rows of the pages it
-- covers: on pages 80% full (0004) most new row versions find no room and
-- move to another page with a new entry in every index; at 45% each fits
-- beside its row, at the price of a heap about twice as large.
-- BenchmarkJournalPerTile measures the claim's Postgres CPU per tile.
-- Applies to pages written from now on (every import); VACUUM FULL tiles
-- repacks existing ones.
--
-- Tile IDs are [A-Za-z0-9._-] (ValidateTileID) and are compared with the
-- "C" collation, byte by byte: the order Go compares them in (the claim
-- cursor shared by a run's workers), whatever the database's default
-- collation, and without a locale-aware comparison per index step.
ALTER TABLE tiles ALTER COLUMN tile_id TYPE text COLLATE "C";
ALTER TABLE upload_rejections ALTER COLUMN tile_id TYPE text COLLATE "C";
ALTER TABLE upload_batches ALTER COLUMN tile_ids TYPE text[] COLLATE "C";
ALTER TABLE tiles SET (fillfactor = 45);

-- A batch's members (tile_ids, sha256s: some 27 kB for 256 tiles) are
-- written on the claim's path, before the first byte is sent; compressing
-- them with pglz there costs several times what storing them costs, and
-- they hardly compress (hex digests and IDs). Stored out of line,
-- uncompressed: about 100 bytes per tile sent, kept with the batch's
-- history.
ALTER TABLE upload_batches ALTER COLUMN tile_ids SET STORAGE EXTERNAL,
                           ALTER COLUMN sha256s SET STORAGE EXTERNAL;
