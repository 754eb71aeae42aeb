-- 0004: leave room on each tiles page for updates.
--
-- Uploads update every tile at least twice (attempts, status). With full
-- pages each update writes a new row version on another page and a new
-- entry in every index; with free space on the page, an update that changes
-- no indexed column (upload_attempts, last_rejection_*) is a HOT update that
-- touches no index. Applies to pages written from now on; existing pages are
-- repacked only by VACUUM FULL, which this migration does not run.
ALTER TABLE tiles SET (fillfactor = 80);
