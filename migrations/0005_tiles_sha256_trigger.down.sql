DROP TRIGGER IF EXISTS tiles_sha256_valid ON tiles;
DROP FUNCTION IF EXISTS tilectl_tiles_sha256_valid();
ALTER TABLE tiles ADD CONSTRAINT tiles_sha256_check CHECK (sha256 ~ '^[0-9a-f]{64}$');
