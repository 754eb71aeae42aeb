-- 0017 down: rejections are indexed by reason again, all of them.
DROP INDEX upload_rejections_unclear_idx;
CREATE INDEX upload_rejections_reason_idx ON upload_rejections (reason, tile_id);
