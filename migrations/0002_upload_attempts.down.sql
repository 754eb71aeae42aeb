-- Undo 0002. A tile that was given up had never reached the provider, so it
-- goes back to 'pending', the only earlier status that tells the truth.
DROP INDEX IF EXISTS tiles_giveup_idx;
UPDATE tiles SET voting_status = 'pending' WHERE voting_status = 'upload_giveup';
ALTER TABLE tiles DROP CONSTRAINT tiles_voting_status_check;
ALTER TABLE tiles ADD CONSTRAINT tiles_voting_status_check
    CHECK (voting_status IN ('pending', 'trusted', 'rejected', 'uploaded'));
ALTER TABLE tiles DROP COLUMN gave_up_at;
ALTER TABLE tiles DROP COLUMN last_rejected_at;
ALTER TABLE tiles DROP COLUMN last_rejection_message;
ALTER TABLE tiles DROP COLUMN last_rejection_reason;
ALTER TABLE tiles DROP COLUMN upload_attempts;
