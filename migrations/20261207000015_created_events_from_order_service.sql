-- CREATED events produced by the order service itself.
--
-- The order service now produces each order's CREATED event after its
-- batch commits and before it commits the batch's offsets. The rows it
-- writes name the record they came from (`source_partition`,
-- `source_offset` of `seckill.orders`); the insert trigger writes no outbox
-- row for those. Every other insert — an older order service (no source),
-- a FAILED row (the compensator, the sweeper) — still writes its event by
-- trigger, as before. The later events of an order (PAID, CANCELLED,
-- REFUND_DUE) carry its source, so the relay can hold them until the order
-- group's committed offset has passed that record: its CREATED event was
-- delivered first.
--
-- Locked first, in the order writers take them (20261206000014).
LOCK TABLE orders, order_events IN ACCESS EXCLUSIVE MODE;

-- Nullable, no default: no rewrite.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS source_partition INTEGER;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS source_offset BIGINT;
ALTER TABLE order_events ADD COLUMN IF NOT EXISTS source_partition INTEGER;
ALTER TABLE order_events ADD COLUMN IF NOT EXISTS source_offset BIGINT;

-- A row trigger with a WHEN: an order service's CREATED row queues no
-- trigger event at all (a statement trigger with a transition table would
-- keep a copy of every row inserted, to write nothing).
CREATE OR REPLACE FUNCTION orders_outbox_on_insert_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, request_id, traceparent,
                              redrive_of, quantity)
    VALUES (NEW.order_id || ':' || NEW.status, NEW.order_id, NEW.activity_id, NEW.sku_id, NEW.round, NEW.user_id, NEW.status,
            NEW.reason, NEW.request_id, NEW.traceparent,
            (SELECT r.original_order_id FROM dlq_redrives r WHERE r.new_order_id = NEW.order_id), NEW.quantity);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS orders_outbox_on_insert ON orders;
CREATE TRIGGER orders_outbox_on_insert AFTER INSERT ON orders
    FOR EACH ROW WHEN (NEW.status <> 'CREATED' OR NEW.source_offset IS NULL)
    EXECUTE FUNCTION orders_outbox_on_insert_row();
DROP FUNCTION IF EXISTS orders_outbox_on_insert();

CREATE OR REPLACE FUNCTION orders_outbox_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, request_id, traceparent,
                              payment_id, redrive_of, quantity, source_partition, source_offset)
    SELECT a.order_id || ':' || a.status, a.order_id, a.activity_id, a.sku_id, a.round, a.user_id, a.status, a.reason,
           a.request_id, a.traceparent,
           CASE WHEN a.status = 'PAID' THEN
               (SELECT p.payment_id FROM payments p WHERE p.order_id = a.order_id AND p.outcome = 'APPLIED') END,
           r.original_order_id, a.quantity, a.source_partition, a.source_offset
      FROM after_update a JOIN before_update b USING (order_id)
      LEFT JOIN dlq_redrives r ON r.new_order_id = a.order_id
     WHERE a.status IS DISTINCT FROM b.status
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, payment_id, quantity,
                              source_partition, source_offset)
    SELECT n.order_id || ':REFUND_DUE:' || n.payment_id, n.order_id, n.activity_id, n.sku_id, n.round, n.user_id,
           'REFUND_DUE', n.refund_reason, n.payment_id, COALESCE(o.quantity, 1), o.source_partition, o.source_offset
      FROM inserted n LEFT JOIN orders o ON o.order_id = n.order_id
     WHERE n.outcome = 'REFUND_DUE' AND n.round IS NOT NULL AND n.payment_id NOT LIKE 'legacy:%'
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;
