DROP TABLE upload_runs;
