-- 0007 down: batches lose their owners and leases; tiles their open batch.
ALTER TABLE tiles DROP COLUMN open_op_id;
DROP INDEX upload_batches_owner_open_idx;
ALTER TABLE upload_batches DROP COLUMN lease_expires_at;
ALTER TABLE upload_batches DROP COLUMN owner_pid;
ALTER TABLE upload_batches DROP COLUMN owner_host;
ALTER TABLE upload_batches DROP COLUMN owner_run;
