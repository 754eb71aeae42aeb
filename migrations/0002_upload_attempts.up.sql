-- 0002: the per-tile upload attempt budget and the upload_giveup status.
ALTER TABLE tiles ADD COLUMN upload_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tiles ADD COLUMN last_rejection_reason TEXT;
ALTER TABLE tiles ADD COLUMN last_rejection_message TEXT;
ALTER TABLE tiles ADD COLUMN last_rejected_at TIMESTAMPTZ;
ALTER TABLE tiles ADD COLUMN gave_up_at TIMESTAMPTZ;

ALTER TABLE tiles DROP CONSTRAINT tiles_voting_status_check;
ALTER TABLE tiles ADD CONSTRAINT tiles_voting_status_check
    CHECK (voting_status IN ('pending', 'trusted', 'rejected', 'uploaded', 'upload_giveup'));

-- status lists a flight's give-ups, newest first.
CREATE INDEX tiles_giveup_idx ON tiles (flight_id, gave_up_at) WHERE voting_status = 'upload_giveup';
