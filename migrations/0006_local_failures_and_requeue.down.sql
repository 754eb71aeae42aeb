-- The legacy local rejections 0006 deleted are not restored: they were
-- never the provider's answers.
ALTER TABLE tiles DROP COLUMN requeued_at;
ALTER TABLE tiles DROP COLUMN requeues;
ALTER TABLE tiles DROP COLUMN budget_base;
