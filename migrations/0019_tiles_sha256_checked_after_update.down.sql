-- 0019 down: one trigger checks tiles.sha256 before an INSERT or an UPDATE of it.
DROP TRIGGER tiles_sha256_valid_update ON tiles;
DROP TRIGGER tiles_sha256_valid ON tiles;
CREATE TRIGGER tiles_sha256_valid BEFORE INSERT OR UPDATE OF sha256 ON tiles
    FOR EACH ROW EXECUTE FUNCTION tilectl_tiles_sha256_valid();
