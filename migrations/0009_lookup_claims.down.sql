-- 0009 down: claims read tiles awaiting a lookup without their indexes.
DROP INDEX upload_rejections_reason_idx;
DROP INDEX upload_batches_failed_idx;
