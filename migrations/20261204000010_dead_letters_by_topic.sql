-- The dead-letter index keyed by topic, partition and offset. Keyed by
-- partition and offset alone, a dead letter of a recreated DLQ topic, or of
-- a second deployment (another topic prefix) sharing this database, took
-- the place of an older one at the same position and was silently left
-- out of every count.
--
-- Rows indexed before this migration name no topic (''): the first
-- compensator started after it adopts them for its topic
-- (`shared/src/db/dead_letters.rs:adopt`). Nothing is deleted.

ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS dlq_topic TEXT NOT NULL DEFAULT '';
ALTER TABLE dead_letters DROP CONSTRAINT IF EXISTS dead_letters_pkey;
ALTER TABLE dead_letters ADD PRIMARY KEY (dlq_topic, dlq_partition, dlq_offset);

-- What a replay or redrive run did is tied to the record of its topic.
ALTER TABLE dlq_run_records ADD COLUMN IF NOT EXISTS dlq_topic TEXT NOT NULL DEFAULT '';
DROP INDEX IF EXISTS dlq_run_records_by_position;
CREATE INDEX IF NOT EXISTS dlq_run_records_by_position ON dlq_run_records (dlq_topic, dlq_partition, dlq_offset);
