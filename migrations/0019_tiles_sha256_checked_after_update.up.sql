-- 0019: tiles.sha256 is checked before an INSERT and after an UPDATE of it.
--
-- For a BEFORE UPDATE row trigger, Postgres fetches and locks each row an
-- UPDATE of tiles writes before it looks at the trigger's column list, so
-- the BEFORE INSERT OR UPDATE OF sha256 trigger of 0005 made every update
-- of a tile (a claim's mark, a settlement, a count) lock the row first: a
-- lock, and a WAL record, per settled tile. An AFTER UPDATE OF sha256 row
-- trigger is not queued unless the update writes sha256, and its error
-- fails the statement that wrote the bad value as before. Both run 0005's
-- function: the same rule, SQLSTATE and constraint name.
DROP TRIGGER tiles_sha256_valid ON tiles;
CREATE TRIGGER tiles_sha256_valid BEFORE INSERT ON tiles
    FOR EACH ROW EXECUTE FUNCTION tilectl_tiles_sha256_valid();
CREATE TRIGGER tiles_sha256_valid_update AFTER UPDATE OF sha256 ON tiles
    FOR EACH ROW EXECUTE FUNCTION tilectl_tiles_sha256_valid();
