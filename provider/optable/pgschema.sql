-- The operation table (package optable, PGStore). One row per
-- (caller scope, operation ID). Applied by optable.EnsureSchema; every
-- statement is idempotent.
CREATE TABLE IF NOT EXISTS operation_records (
    scope           TEXT        NOT NULL,
    op_id           TEXT        NOT NULL,
    method          TEXT        NOT NULL,
    fingerprint     TEXT        NOT NULL,
    persist         BOOLEAN     NOT NULL,
    idem            BOOLEAN     NOT NULL,
    state           TEXT        NOT NULL
        CONSTRAINT operation_records_state_check CHECK (state IN ('live', 'released', 'sealed', 'indeterminate')),
    gen             BIGINT      NOT NULL DEFAULT 1,
    outcome_status  INTEGER,
    outcome_header  JSONB,
    outcome_body    BYTEA,
    outcome_failure BOOLEAN,
    expires_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (scope, op_id),
    CONSTRAINT operation_records_sealed_check CHECK ((state = 'sealed') = (outcome_status IS NOT NULL))
);

-- Which admission made a row live (optable.Record.Token). ALTER rather
-- than a column of the CREATE above, so that EnsureSchema also adds it to
-- a table that lacks it.
ALTER TABLE operation_records ADD COLUMN IF NOT EXISTS admission_token BIGINT NOT NULL DEFAULT 0;

-- GC deletes finished records by expiry. Recover (once per start) scans
-- the table instead of keeping an index on live rows that every seal would
-- have to update.
CREATE INDEX IF NOT EXISTS operation_records_gc_idx ON operation_records (expires_at) WHERE state <> 'live';

-- Strict client sequencing: the last committed sequence per (scope, client).
CREATE TABLE IF NOT EXISTS client_sequences (
    scope          TEXT        NOT NULL,
    client_id      TEXT        NOT NULL,
    last_committed BIGINT      NOT NULL CONSTRAINT client_sequences_last_check CHECK (last_committed >= 0),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, client_id)
);
