-- 0008: the history of upload-pending runs, one row per run and flight.
-- A run inserts its row when it starts a flight and sets finished_at and
-- the rest when it ends (also when it fails or is interrupted); a run that
-- was SIGKILLed, or whose machine died, keeps finished_at NULL, which
-- `tilectl status` shows as unfinished. Counts are NULL until the run ends:
-- a number that is not known is not 0. run_id is the run's own ID (the
-- same for every flight of one run).
CREATE TABLE upload_runs (
    id          BIGSERIAL PRIMARY KEY,
    run_id      TEXT NOT NULL,
    flight_id   TEXT NOT NULL,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    version     TEXT NOT NULL DEFAULT '',
    started_at  TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ,
    outcome     TEXT,
    exit_code   INTEGER,
    accepted    INTEGER,
    duplicate   INTEGER,
    rejected    INTEGER,
    given_up    INTEGER,
    pending     INTEGER,
    bytes       BIGINT,
    error       TEXT,
    UNIQUE (run_id, flight_id)
);
CREATE INDEX upload_runs_flight_started ON upload_runs (flight_id, started_at DESC, id DESC);
