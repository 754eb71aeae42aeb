-- 0016 down: tiles do not record a pruned blob.
ALTER TABLE tiles DROP COLUMN blob_pruned_at;
