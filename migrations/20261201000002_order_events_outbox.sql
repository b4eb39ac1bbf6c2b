-- Order outcome events (topic seckill.order-events) through a transactional
-- outbox: every change of an order's status writes its event in the same
-- transaction, by trigger, whoever makes the change (the order service, the
-- compensator, the sweeper, the order lifecycle). A relay publishes the rows
-- in id order and marks them; relayed rows are pruned after a retention
-- period, their counts kept per sale round for the reconciliation.

-- What follows an order from its HTTP request on: its events carry them.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS request_id TEXT;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS traceparent TEXT;

CREATE TABLE IF NOT EXISTS order_events (
    id          BIGSERIAL   PRIMARY KEY,
    -- Stable: one event per order and state, the same if it is sent again.
    event_id    TEXT        NOT NULL UNIQUE,
    order_id    TEXT        NOT NULL,
    activity_id BIGINT      NOT NULL,
    sku_id      BIGINT      NOT NULL,
    round       INTEGER     NOT NULL,
    user_id     BIGINT      NOT NULL,
    type        TEXT        NOT NULL,
    reason      TEXT,
    occurred_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    request_id  TEXT,
    traceparent TEXT,
    relayed_at  TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS order_events_unrelayed ON order_events (id) WHERE relayed_at IS NULL;
CREATE INDEX IF NOT EXISTS order_events_by_sale ON order_events (activity_id, sku_id, round, type);

-- Relayed events pruned so far, per sale round and type.
CREATE TABLE IF NOT EXISTS order_events_pruned (
    activity_id BIGINT  NOT NULL,
    sku_id      BIGINT  NOT NULL,
    round       INTEGER NOT NULL,
    type        TEXT    NOT NULL,
    count       BIGINT  NOT NULL,
    PRIMARY KEY (activity_id, sku_id, round, type)
);

CREATE OR REPLACE FUNCTION orders_outbox_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, request_id, traceparent)
    SELECT n.order_id || ':' || n.status, n.order_id, n.activity_id, n.sku_id, n.round, n.user_id, n.status, n.reason,
           n.request_id, n.traceparent
      FROM inserted n;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION orders_outbox_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, request_id, traceparent)
    SELECT a.order_id || ':' || a.status, a.order_id, a.activity_id, a.sku_id, a.round, a.user_id, a.status, a.reason,
           a.request_id, a.traceparent
      FROM after_update a JOIN before_update b USING (order_id)
     WHERE a.status IS DISTINCT FROM b.status
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS orders_outbox_on_insert ON orders;
CREATE TRIGGER orders_outbox_on_insert AFTER INSERT ON orders
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION orders_outbox_on_insert();
DROP TRIGGER IF EXISTS orders_outbox_on_update ON orders;
CREATE TRIGGER orders_outbox_on_update AFTER UPDATE ON orders
    REFERENCING OLD TABLE AS before_update NEW TABLE AS after_update FOR EACH STATEMENT EXECUTE FUNCTION orders_outbox_on_update();
