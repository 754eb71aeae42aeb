-- 0010 down: batches forget their client sequence; the streams go.
DROP INDEX upload_batches_one_open_per_stream;
ALTER TABLE upload_batches DROP CONSTRAINT upload_batches_client_seq_check;
ALTER TABLE upload_batches DROP COLUMN client_seq;
ALTER TABLE upload_batches DROP COLUMN client_stream;
DROP TABLE upload_client_sequences;
