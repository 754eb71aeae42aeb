-- 0012 down: back to 0011's claims by row lock alone. Stop every
-- upload-pending run first.
ALTER TABLE tiles DROP COLUMN open_op_id;
