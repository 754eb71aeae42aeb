-- 0010: strict client sequencing (provider-api.md "Optional: strict
-- client sequencing"). One row per (provider, client ID): the last
-- sequence number the client knows committed. Named upload_client_sequences,
-- not client_sequences: that is the provider's own table (package
-- operation), and the two must never meet in one database by name.
--
-- A sequenced batch carries its stream and number from the transaction
-- that journals it, before its first byte is sent; every resend, after a
-- crash too, sends the same number (or the one a SEQUENCE_GAP rebound it
-- to). The number is always last_committed + 1 of its stream.
CREATE TABLE upload_client_sequences (
    id             BIGSERIAL   PRIMARY KEY,
    provider       TEXT        NOT NULL,
    client_id      TEXT        NOT NULL,
    last_committed BIGINT      NOT NULL DEFAULT 0
        CONSTRAINT upload_client_sequences_last_check CHECK (last_committed >= 0),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (provider, client_id)
);

ALTER TABLE upload_batches ADD COLUMN client_stream BIGINT REFERENCES upload_client_sequences (id);
ALTER TABLE upload_batches ADD COLUMN client_seq BIGINT;
ALTER TABLE upload_batches ADD CONSTRAINT upload_batches_client_seq_check
    CHECK ((client_stream IS NULL) = (client_seq IS NULL) AND (client_seq IS NULL OR client_seq > 0));
-- One sequence in flight per stream, whichever process sent it: a second
-- open batch would carry a number after one not yet committed (a gap).
CREATE UNIQUE INDEX upload_batches_one_open_per_stream ON upload_batches (client_stream)
    WHERE state = 'open' AND client_stream IS NOT NULL;
