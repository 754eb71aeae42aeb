-- 0016: a tile's cached blob can be pruned once the provider holds it.
--
-- blob_pruned_at is when `tilectl flights prune` (or cache.retention at
-- the end of an upload run) removed the tile's blob from the cache; NULL
-- while the cache keeps it. Only uploaded tiles are pruned, so the tile's
-- status, attempts and give-up stay as they were; the column lets every
-- command that would read the bytes (verify, a requeue, a re-upload) say
-- that they are gone, instead of calling the blob missing. Not indexed:
-- setting it is a HOT update (see 0013).
ALTER TABLE tiles ADD COLUMN blob_pruned_at TIMESTAMPTZ;
