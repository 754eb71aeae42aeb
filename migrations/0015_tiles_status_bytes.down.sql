-- 0015 down: the status index without the tiles' sizes.
CREATE INDEX tiles_flight_status_plain_idx ON tiles (flight_id, voting_status);
DROP INDEX tiles_flight_status_idx;
ALTER INDEX tiles_flight_status_plain_idx RENAME TO tiles_flight_status_idx;
