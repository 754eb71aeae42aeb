-- 0005: validate tiles.sha256 only when it is written.
--
-- A CHECK constraint is evaluated on every UPDATE of a row, whichever
-- columns change, and the regular expression of tiles_sha256_check was a
-- large part of the cost of counting upload attempts over many tiles. A
-- trigger that fires on INSERT and on UPDATE OF sha256 keeps exactly the
-- same rule for every value that is stored, and costs nothing when only
-- upload_attempts or the status changes.
CREATE FUNCTION tilectl_tiles_sha256_valid() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.sha256 IS NULL OR NEW.sha256 !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'tile % has an invalid sha256 %', NEW.tile_id, left(NEW.sha256, 80)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tiles_sha256_check';
    END IF;
    RETURN NEW;
END
$$;

ALTER TABLE tiles DROP CONSTRAINT tiles_sha256_check;
CREATE TRIGGER tiles_sha256_valid BEFORE INSERT OR UPDATE OF sha256 ON tiles
    FOR EACH ROW EXECUTE FUNCTION tilectl_tiles_sha256_valid();
