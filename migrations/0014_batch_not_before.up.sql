-- 0014: the provider's advised wait, journaled with the batch.
--
-- An answer that asks the client to wait (Retry-After in seconds or as an
-- HTTP date, or the retry extension's "after") sets not_before, by the
-- database's clock, so every run on every host sees the same time. No run
-- resends the batch under its key before it; claims of other tiles are
-- unaffected. NULL: the provider asked for no wait.
ALTER TABLE upload_batches ADD COLUMN not_before TIMESTAMPTZ;
