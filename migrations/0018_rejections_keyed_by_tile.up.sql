-- 0018: a rejection's key leads with its tile.
--
-- Every lookup of rejections names a tile (a claim's, a count's, a
-- budget's, the foreign key's check when a tile is deleted); none names
-- an operation alone. With the tile first, the key serves them all, the
-- foreign key's check included (one lookup per deleted tile, which
-- otherwise reads the whole table); a count's mark of a rejection writes
-- a key entry whichever column leads. ON CONFLICT (op_id, tile_id) finds
-- the key: it names the same columns.
ALTER TABLE upload_rejections DROP CONSTRAINT upload_rejections_pkey;
ALTER TABLE upload_rejections ADD PRIMARY KEY (tile_id, op_id);
