-- 0013 down: tile IDs in the database's default collation, pages 80% full,
-- batch members compressed.
ALTER TABLE upload_batches ALTER COLUMN tile_ids SET STORAGE EXTENDED,
                           ALTER COLUMN sha256s SET STORAGE EXTENDED;
ALTER TABLE tiles SET (fillfactor = 80);
ALTER TABLE upload_batches ALTER COLUMN tile_ids TYPE text[] COLLATE "default";
ALTER TABLE upload_rejections ALTER COLUMN tile_id TYPE text COLLATE "default";
ALTER TABLE tiles ALTER COLUMN tile_id TYPE text COLLATE "default";
