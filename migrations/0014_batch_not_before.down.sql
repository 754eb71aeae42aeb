-- 0014 down: batches carry no advised wait.
ALTER TABLE upload_batches DROP COLUMN not_before;
