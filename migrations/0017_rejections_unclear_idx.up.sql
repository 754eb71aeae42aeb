-- 0017: the index of unclear rejections holds only those.
--
-- A claim and AmbiguousPending look up the rejections whose reason is
-- protocol_error (tilestore.ReasonProtocolError: an answer that settled
-- nothing clear for the tile, which then awaits a lookup). They read them
-- through this partial index; upload_rejections_reason_idx held every
-- rejection by reason, and no statement reads it otherwise (the foreign
-- key's check on deleting a tile could only scan it whole: 0018 gives
-- that check a key that leads with the tile). Counting a rejection
-- sets its counted_at, which upload_rejections_uncounted_idx's predicate
-- names, so that update is never a HOT one and writes a new entry in
-- every index whose predicate the new row version meets: with this index
-- that is only a protocol_error rejection's, not every rejection's.
DROP INDEX upload_rejections_reason_idx;
CREATE INDEX upload_rejections_unclear_idx ON upload_rejections (tile_id) WHERE reason = 'protocol_error';
