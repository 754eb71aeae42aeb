-- 0013: room on each tiles page for a claim's mark; tile IDs in byte order;
-- batch members stored uncompressed.
--
-- A claim writes each of its tiles once (open_op_id, no indexed column: a
-- HOT update, which touches no index, when the new row version fits on the
-- row's page). Claims take tiles in tile_id order, which is the order
-- tiles import writes them, so a batch marks every row of the pages it
-- covers: with pages 80% full (0004) about one row in five found room and
-- the rest were moved to another page with a new entry in every index.
-- At 45% each row's new version fits beside it. BenchmarkJournalPerTile
-- on freshly imported tiles, Postgres CPU per tile: 28-30 us at 80%, 22-23
-- at 45%. The heap of a flight's tiles is about twice as large. Applies to
-- pages written from now on (every import); VACUUM FULL tiles repacks
-- existing ones.
--
-- Tile IDs are [A-Za-z0-9._-] (ValidateTileID) and are compared with the
-- "C" collation, byte by byte: the order Go compares them in (the claim
-- cursor shared by a run's workers), whatever the database's default
-- collation, and without a locale-aware comparison per index step
-- (BenchmarkJournalPerTile: 23 -> 20-21 us per tile on a C.UTF-8 database).
ALTER TABLE tiles ALTER COLUMN tile_id TYPE text COLLATE "C";
ALTER TABLE upload_rejections ALTER COLUMN tile_id TYPE text COLLATE "C";
ALTER TABLE upload_batches ALTER COLUMN tile_ids TYPE text[] COLLATE "C";
ALTER TABLE tiles SET (fillfactor = 45);

-- A batch's members (tile_ids, sha256s: some 27 kB for 256 tiles) were
-- compressed with pglz as the claim journaled them: 0.32 ms per batch row
-- against 0.06 stored as they are (EXPLAIN ANALYZE of 50 inserts of
-- 256-tile batches, 16.2 ms vs 2.9), on the claim's path before the first
-- byte is sent. Stored out of line, uncompressed: about 100 bytes per
-- tile sent, kept with the batch's history.
ALTER TABLE upload_batches ALTER COLUMN tile_ids SET STORAGE EXTERNAL,
                           ALTER COLUMN sha256s SET STORAGE EXTERNAL;
