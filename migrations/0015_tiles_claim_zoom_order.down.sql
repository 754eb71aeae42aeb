-- 0015 down: claims in zoom order lose their index.
DROP INDEX IF EXISTS tiles_claim_zoom_idx;
