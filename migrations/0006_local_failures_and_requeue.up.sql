-- 0006: a bad cached blob is not a provider rejection; given-up tiles can
-- be requeued with a fresh budget.
--
-- Earlier versions recorded a tile whose blob was missing or corrupt as a
-- local rejection (reason blob_missing or blob_corrupt, under an operation
-- ID that never reached the provider, so no upload_batches row) and counted
-- it into upload_attempts. Such a rejection is the operator's problem, not
-- the provider's answer: it must not keep spending the tile's budget.
--   * Uncounted ones are deleted: nothing writes them any more, and counting
--     them would spend attempts.
--   * Counted ones are taken back out of upload_attempts of tiles that are
--     still uploadable, and deleted. Tiles they pushed into upload_giveup
--     stay given up: their give-up is in the flight data recorder, and only
--     a person moves a tile back (tilectl tiles requeue), which gives it a
--     fresh budget anyway.
-- Provider rejections, and local too_large ones, are untouched.
WITH legacy AS (
    DELETE FROM upload_rejections r
     WHERE r.reason IN ('blob_missing', 'blob_corrupt')
       AND NOT EXISTS (SELECT 1 FROM upload_batches b WHERE b.op_id = r.op_id)
    RETURNING r.tile_id, r.counted_at
), per AS (
    SELECT tile_id, count(*)::int AS n FROM legacy WHERE counted_at IS NOT NULL GROUP BY tile_id
)
UPDATE tiles t SET upload_attempts = greatest(t.upload_attempts - per.n, 0)
  FROM per
 WHERE t.tile_id = per.tile_id AND t.voting_status IN ('pending', 'trusted');

-- budget_base is upload_attempts when the tile was last requeued: the
-- per-tile budget counts from there, while upload_attempts keeps every
-- attempt ever spent. requeues and requeued_at say how often and when.
ALTER TABLE tiles ADD COLUMN budget_base INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tiles ADD COLUMN requeues INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tiles ADD COLUMN requeued_at TIMESTAMPTZ;
