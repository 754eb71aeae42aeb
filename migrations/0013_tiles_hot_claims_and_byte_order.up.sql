-- 0013: room on each tiles page for a claim's mark; tile IDs in byte order.
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
