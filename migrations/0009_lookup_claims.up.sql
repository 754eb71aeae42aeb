-- 0009: a claim leaves out tiles awaiting a lookup (members of a failed
-- batch of the flight, or rejected with an unclear reason) and reads them
-- through these indexes: with none, a claim pays two empty index probes
-- instead of scanning every batch and rejection ever recorded.
CREATE INDEX upload_batches_failed_idx ON upload_batches (flight_id) WHERE state = 'failed';
CREATE INDEX upload_rejections_reason_idx ON upload_rejections (reason, tile_id);
