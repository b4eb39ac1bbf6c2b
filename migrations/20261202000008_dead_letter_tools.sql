-- The dead-letter tools: an index of the dead-letter topic (for the counts
-- operators ask first), an audit trail of every replay and redrive run, and
-- the link from a redriven order to the dead-lettered one it replaces.

-- One row per record of the dead-letter topic, written by the compensator as
-- it reads the record (before settling it): `seckillctl dlq stats`, /metrics
-- and the dashboard count from here.
CREATE TABLE IF NOT EXISTS dead_letters (
    dlq_partition INTEGER     NOT NULL,
    dlq_offset    BIGINT      NOT NULL,
    reason        TEXT        NOT NULL,
    order_id      TEXT,
    activity_id   BIGINT,
    sku_id        BIGINT,
    failed_at     TIMESTAMPTZ NOT NULL,
    replay_count  INTEGER     NOT NULL DEFAULT 0,
    PRIMARY KEY (dlq_partition, dlq_offset)
);
CREATE INDEX IF NOT EXISTS dead_letters_by_time ON dead_letters (failed_at);

-- Every `seckillctl dlq replay` and `dlq redrive` run, dry runs included.
CREATE TABLE IF NOT EXISTS dlq_runs (
    run_id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        TEXT        NOT NULL CHECK (kind IN ('replay', 'redrive')),
    operator    TEXT        NOT NULL,
    note        TEXT        NOT NULL DEFAULT '',
    filter      JSONB       NOT NULL,
    target      TEXT,
    dry_run     BOOLEAN     NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ,
    sent        INTEGER     NOT NULL DEFAULT 0,
    skipped     INTEGER     NOT NULL DEFAULT 0,
    refused     INTEGER     NOT NULL DEFAULT 0,
    error       TEXT
);

-- What a run did with each record it looked at.
CREATE TABLE IF NOT EXISTS dlq_run_records (
    run_id        BIGINT      NOT NULL REFERENCES dlq_runs (run_id),
    dlq_partition INTEGER     NOT NULL,
    dlq_offset    BIGINT      NOT NULL,
    order_id      TEXT,
    outcome       TEXT        NOT NULL CHECK (outcome IN ('SENT', 'PLACED', 'SKIPPED', 'REFUSED')),
    detail        TEXT        NOT NULL DEFAULT '',
    new_order_id  TEXT,
    at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, dlq_partition, dlq_offset)
);
CREATE INDEX IF NOT EXISTS dlq_run_records_by_position ON dlq_run_records (dlq_partition, dlq_offset);

-- A redrive per original order at most: written before the deduction (with
-- the call id it uses, so a run interrupted and run again asks the same
-- call), completed with the new order id once placed.
CREATE TABLE IF NOT EXISTS dlq_redrives (
    original_order_id TEXT        PRIMARY KEY,
    call_id           TEXT        NOT NULL,
    run_id            BIGINT      NOT NULL REFERENCES dlq_runs (run_id),
    new_order_id      TEXT        UNIQUE,
    placed_at         TIMESTAMPTZ
);

-- Every event of a redriven order names the order it replaces.
ALTER TABLE order_events ADD COLUMN IF NOT EXISTS redrive_of TEXT;

CREATE OR REPLACE FUNCTION orders_outbox_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, request_id, traceparent,
                              redrive_of)
    SELECT n.order_id || ':' || n.status, n.order_id, n.activity_id, n.sku_id, n.round, n.user_id, n.status, n.reason,
           n.request_id, n.traceparent, r.original_order_id
      FROM inserted n LEFT JOIN dlq_redrives r ON r.new_order_id = n.order_id;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION orders_outbox_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, request_id, traceparent,
                              payment_id, redrive_of)
    SELECT a.order_id || ':' || a.status, a.order_id, a.activity_id, a.sku_id, a.round, a.user_id, a.status, a.reason,
           a.request_id, a.traceparent,
           CASE WHEN a.status = 'PAID' THEN
               (SELECT p.payment_id FROM payments p WHERE p.order_id = a.order_id AND p.outcome = 'APPLIED') END,
           r.original_order_id
      FROM after_update a JOIN before_update b USING (order_id)
      LEFT JOIN dlq_redrives r ON r.new_order_id = a.order_id
     WHERE a.status IS DISTINCT FROM b.status
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;
