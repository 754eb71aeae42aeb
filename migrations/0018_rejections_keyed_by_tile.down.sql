-- 0018 down: a rejection's key leads with its operation again.
ALTER TABLE upload_rejections DROP CONSTRAINT upload_rejections_pkey;
ALTER TABLE upload_rejections ADD PRIMARY KEY (op_id, tile_id);
