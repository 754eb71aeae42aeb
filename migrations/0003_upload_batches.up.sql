-- 0003: the client-side journal of upload operations.
--
-- A batch is recorded here, with its operation ID (the Idempotency-Key) and
-- its exact members, before its first byte is sent. Every retry, in this run
-- or after a crash, resends the same key with the same members. A batch is
-- settled in the same transaction that marks its accepted tiles uploaded and
-- records its rejections.
CREATE TABLE upload_batches (
    op_id       TEXT        PRIMARY KEY,
    flight_id   TEXT        NOT NULL REFERENCES flights (flight_id),
    fingerprint TEXT        NOT NULL,
    tile_ids    TEXT[]      NOT NULL,
    sha256s     TEXT[]      NOT NULL,
    state       TEXT        NOT NULL DEFAULT 'open'
        CONSTRAINT upload_batches_state_check CHECK (state IN ('open', 'settled', 'failed')),
    sends       INTEGER     NOT NULL DEFAULT 0,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    settled_at  TIMESTAMPTZ,
    http_status INTEGER,
    detail      TEXT,
    CONSTRAINT upload_batches_members_check CHECK (cardinality(tile_ids) = cardinality(sha256s))
);
CREATE INDEX upload_batches_open_idx ON upload_batches (flight_id, created_at) WHERE state = 'open';

-- One row per answer that rejected a tile: a provider rejection in a settled
-- batch, or a local one (blob missing or corrupt). (op_id, tile_id) is the key
-- that makes counting exactly-once: counted_at is set in the transaction that
-- adds the rejection to tiles.upload_attempts.
CREATE TABLE upload_rejections (
    op_id       TEXT        NOT NULL,
    tile_id     TEXT        NOT NULL REFERENCES tiles (tile_id),
    reason      TEXT        NOT NULL,
    message     TEXT,
    rejected_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    counted_at  TIMESTAMPTZ,
    PRIMARY KEY (op_id, tile_id)
);
CREATE INDEX upload_rejections_uncounted_idx ON upload_rejections (tile_id) WHERE counted_at IS NULL;
