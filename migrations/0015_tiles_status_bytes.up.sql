-- 0015: the status index also carries each tile's size.
--
-- `tilectl flights list` shows, per flight, its tiles by status and the
-- bytes their blobs take in the cache. With size_bytes in the status index
-- (as an INCLUDE column, not a key) both come from an index-only scan of
-- this index, a fraction of the tiles heap, which fillfactor 45 (0013)
-- makes about twice as large as its rows. The index replaces the one it
-- extends under the same name, so the number of indexes an insert or a
-- status change writes stays the same; size_bytes never changes after
-- import, so it adds no index write to any update.
CREATE INDEX tiles_flight_status_bytes_idx ON tiles (flight_id, voting_status) INCLUDE (size_bytes);
DROP INDEX tiles_flight_status_idx;
ALTER INDEX tiles_flight_status_bytes_idx RENAME TO tiles_flight_status_idx;
