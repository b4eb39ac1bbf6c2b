-- Several units per order, several orders per user up to a limit.
--
-- Both tables are locked first, in the order the order writers take them
-- (an insert into orders writes its event by trigger): nothing is raised
-- midway, so writers queue behind the migration instead of deadlocking with
-- it (20261204000012). Order writes, the relay and reads of orders wait for
-- the whole migration: one scan of orders for the checks and the build of
-- one index, seconds per million orders.
LOCK TABLE orders, order_events IN ACCESS EXCLUSIVE MODE;

-- `quantity`: the units the order holds (1 for every order written before).
-- A constant default: no rewrite (the range check scans the rows once).
ALTER TABLE orders ADD COLUMN IF NOT EXISTS quantity SMALLINT NOT NULL DEFAULT 1
    CONSTRAINT orders_quantity_range CHECK (quantity BETWEEN 1 AND 100);

-- `slot`: which of the user's places in the round the order holds. A sale
-- with a limit of one unit per user has one place (0): one live order per
-- user, as before. A sale with a limit of N has N places, one per live
-- order (an order holds at least one unit), handed out by the deduction;
-- the unique index is the database's own check that Redis never gave one
-- place twice (after a failover that lost writes, say).
ALTER TABLE orders ADD COLUMN IF NOT EXISTS slot SMALLINT NOT NULL DEFAULT 0
    CONSTRAINT orders_slot_range CHECK (slot BETWEEN 0 AND 99);
CREATE UNIQUE INDEX IF NOT EXISTS orders_one_live_per_user_slot
    ON orders (activity_id, sku_id, round, user_id, slot) WHERE status IN ('CREATED', 'PAID');
DROP INDEX IF EXISTS orders_one_live_per_user;

-- Every event of an order says how many units it holds.
ALTER TABLE order_events ADD COLUMN IF NOT EXISTS quantity SMALLINT NOT NULL DEFAULT 1;

CREATE OR REPLACE FUNCTION orders_outbox_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, request_id, traceparent,
                              redrive_of, quantity)
    SELECT n.order_id || ':' || n.status, n.order_id, n.activity_id, n.sku_id, n.round, n.user_id, n.status, n.reason,
           n.request_id, n.traceparent, r.original_order_id, n.quantity
      FROM inserted n LEFT JOIN dlq_redrives r ON r.new_order_id = n.order_id;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION orders_outbox_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, request_id, traceparent,
                              payment_id, redrive_of, quantity)
    SELECT a.order_id || ':' || a.status, a.order_id, a.activity_id, a.sku_id, a.round, a.user_id, a.status, a.reason,
           a.request_id, a.traceparent,
           CASE WHEN a.status = 'PAID' THEN
               (SELECT p.payment_id FROM payments p WHERE p.order_id = a.order_id AND p.outcome = 'APPLIED') END,
           r.original_order_id, a.quantity
      FROM after_update a JOIN before_update b USING (order_id)
      LEFT JOIN dlq_redrives r ON r.new_order_id = a.order_id
     WHERE a.status IS DISTINCT FROM b.status
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;

-- A refund owed names the units of the order it was for.
CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, payment_id, quantity)
    SELECT n.order_id || ':REFUND_DUE:' || n.payment_id, n.order_id, n.activity_id, n.sku_id, n.round, n.user_id,
           'REFUND_DUE', n.refund_reason, n.payment_id, COALESCE(o.quantity, 1)
      FROM inserted n LEFT JOIN orders o ON o.order_id = n.order_id
     WHERE n.outcome = 'REFUND_DUE' AND n.round IS NOT NULL AND n.payment_id NOT LIKE 'legacy:%'
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;
