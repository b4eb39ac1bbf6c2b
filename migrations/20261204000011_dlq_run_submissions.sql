-- A run started from the dashboard's dead-letters page names its
-- submission (the form's one-time key): the same form sent twice starts one
-- run, and the second is answered with the first. Runs of seckillctl name
-- none (NULLs never conflict). What a run did with a record keeps the
-- record's reason, so the page can show a finished run as it ran.
ALTER TABLE dlq_runs ADD COLUMN IF NOT EXISTS submission TEXT UNIQUE;
ALTER TABLE dlq_run_records ADD COLUMN IF NOT EXISTS reason TEXT;
