-- 0001: flights and the tiles their navigation system produced.
CREATE TABLE flights (
    flight_id  TEXT        PRIMARY KEY,
    state      TEXT        NOT NULL CONSTRAINT flights_state_check CHECK (state IN ('airborne', 'on_ground')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE tiles (
    tile_id       TEXT        PRIMARY KEY,
    flight_id     TEXT        NOT NULL REFERENCES flights (flight_id),
    z             SMALLINT    NOT NULL CONSTRAINT tiles_z_check CHECK (z BETWEEN 0 AND 24),
    x             BIGINT      NOT NULL,
    y             BIGINT      NOT NULL,
    content_type  TEXT        NOT NULL,
    size_bytes    BIGINT      NOT NULL CONSTRAINT tiles_size_check CHECK (size_bytes >= 0),
    sha256        TEXT        NOT NULL CONSTRAINT tiles_sha256_check CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    blob_path     TEXT        NOT NULL,
    captured_at   TIMESTAMPTZ NOT NULL,
    voting_status TEXT        NOT NULL DEFAULT 'pending'
        CONSTRAINT tiles_voting_status_check CHECK (voting_status IN ('pending', 'trusted', 'rejected', 'uploaded')),
    uploaded_at   TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT tiles_xy_check CHECK (x >= 0 AND y >= 0 AND x < (1::BIGINT << z) AND y < (1::BIGINT << z))
);

-- PendingUploads pages a flight's uploadable tiles in tile_id order.
CREATE INDEX tiles_pending_idx ON tiles (flight_id, tile_id) WHERE voting_status IN ('pending', 'trusted');
-- status counts tiles per flight and status.
CREATE INDEX tiles_flight_status_idx ON tiles (flight_id, voting_status);
