DROP TABLE IF EXISTS upload_rejections;
DROP TABLE IF EXISTS upload_batches;
