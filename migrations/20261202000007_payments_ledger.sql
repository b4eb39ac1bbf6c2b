-- The payments ledger: every payment the payment provider reports
-- (POST /api/payments/notify), keyed by the provider's payment id, applied
-- once or owed back. APPLIED: it paid a CREATED order (now PAID; at most one
-- per order). REFUND_DUE: it came for an order already paid by another
-- payment, cancelled (or past its deadline), failed, or unknown — the money
-- is the buyer's, and `seckillctl payments refunds` lists it until it is
-- marked refunded. A REFUND_DUE row writes a REFUND_DUE event to the
-- outbox; PAID events carry the id of the payment that paid the order.
--
-- Rows before this ledger: every PAID order gets an APPLIED row
-- ('legacy:<orderId>') and every late payment not refunded a REFUND_DUE row
-- ('legacy:<orderId>:<key>'), so "paid orders = applied payments" holds
-- from the start. While older binaries still run (a rolling upgrade), the
-- two triggers below do the same for what they write: a PAID order without
-- an APPLIED row, a late_payments row.
--
-- Locks: creates `payments`; `order_events ADD COLUMN payment_id`
-- (nullable): ACCESS EXCLUSIVE, brief; the backfill reads `orders` (PAID)
-- and `late_payments`; a row trigger on `orders` (fires only when an update
-- makes a row PAID) and a statement trigger on `late_payments`: SHARE ROW
-- EXCLUSIVE, brief; replaces the function of the orders update trigger (PAID
-- events carry the payment id). Older binaries keep working: the buyer's
-- /pay of an older edge still marks orders PAID, and the ledger follows.

CREATE TABLE IF NOT EXISTS payments (
    payment_id    TEXT        PRIMARY KEY,
    order_id      TEXT        NOT NULL,
    outcome       TEXT        NOT NULL CHECK (outcome IN ('APPLIED', 'REFUND_DUE')),
    refund_reason TEXT,
    user_id       BIGINT,
    activity_id   BIGINT,
    sku_id        BIGINT,
    round         INTEGER,
    notification  JSONB       NOT NULL,
    received_at   TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    refunded_at   TIMESTAMPTZ,
    CONSTRAINT payments_reason_when_refund_due CHECK ((outcome = 'REFUND_DUE') = (refund_reason IS NOT NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS payments_one_applied_per_order ON payments (order_id) WHERE outcome = 'APPLIED';
CREATE INDEX IF NOT EXISTS payments_by_sale ON payments (activity_id, sku_id, round, outcome);
CREATE INDEX IF NOT EXISTS payments_refunds_due ON payments (received_at) WHERE outcome = 'REFUND_DUE' AND refunded_at IS NULL;

ALTER TABLE order_events ADD COLUMN IF NOT EXISTS payment_id TEXT;

INSERT INTO payments (payment_id, order_id, outcome, user_id, activity_id, sku_id, round, notification, received_at)
SELECT 'legacy:' || order_id, order_id, 'APPLIED', user_id, activity_id, sku_id, round,
       jsonb_build_object('legacy', true, 'idempotencyKey', payment_key), COALESCE(paid_at, now())
  FROM orders WHERE status = 'PAID'
ON CONFLICT DO NOTHING;

INSERT INTO payments (payment_id, order_id, outcome, refund_reason, user_id, activity_id, sku_id, round, notification,
                      received_at, refunded_at)
SELECT 'legacy:' || order_id || ':' || payment_key, order_id, 'REFUND_DUE', 'ORDER_CANCELLED', user_id, activity_id,
       sku_id, round, jsonb_build_object('legacy', true, 'idempotencyKey', payment_key), recorded_at, refunded_at
  FROM late_payments
ON CONFLICT DO NOTHING;

-- An older edge's /pay: the order became PAID with no payment recorded.
CREATE OR REPLACE FUNCTION payments_from_legacy_pay() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO payments (payment_id, order_id, outcome, user_id, activity_id, sku_id, round, notification)
    SELECT 'legacy:' || NEW.order_id, NEW.order_id, 'APPLIED', NEW.user_id, NEW.activity_id, NEW.sku_id, NEW.round,
           jsonb_build_object('legacy', true, 'idempotencyKey', NEW.payment_key)
     WHERE NOT EXISTS (SELECT 1 FROM payments WHERE order_id = NEW.order_id AND outcome = 'APPLIED')
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS payments_from_legacy_pay ON orders;
CREATE TRIGGER payments_from_legacy_pay AFTER UPDATE OF status ON orders
    FOR EACH ROW WHEN (NEW.status = 'PAID' AND OLD.status IS DISTINCT FROM 'PAID')
    EXECUTE FUNCTION payments_from_legacy_pay();

-- An older edge's late payment.
CREATE OR REPLACE FUNCTION payments_from_late_payments() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO payments (payment_id, order_id, outcome, refund_reason, user_id, activity_id, sku_id, round, notification)
    SELECT 'legacy:' || n.order_id || ':' || n.payment_key, n.order_id, 'REFUND_DUE', 'ORDER_CANCELLED', n.user_id,
           n.activity_id, n.sku_id, n.round, jsonb_build_object('legacy', true, 'idempotencyKey', n.payment_key)
      FROM inserted n
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS payments_from_late_payments ON late_payments;
CREATE TRIGGER payments_from_late_payments AFTER INSERT ON late_payments
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION payments_from_late_payments();

-- REFUND_DUE events of payments for orders PostgreSQL holds (a payment for
-- an order never written has no sale round to file it under: it is in the
-- refunds list only; the legacy late payments have their PAYMENT_LATE event).
CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, payment_id)
    SELECT n.order_id || ':REFUND_DUE:' || n.payment_id, n.order_id, n.activity_id, n.sku_id, n.round, n.user_id,
           'REFUND_DUE', n.refund_reason, n.payment_id
      FROM inserted n
     WHERE n.outcome = 'REFUND_DUE' AND n.round IS NOT NULL AND n.payment_id NOT LIKE 'legacy:%'
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS payments_outbox ON payments;
CREATE TRIGGER payments_outbox AFTER INSERT ON payments
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION payments_outbox();

-- PAID events carry the payment that paid the order.
CREATE OR REPLACE FUNCTION orders_outbox_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason, request_id, traceparent,
                              payment_id)
    SELECT a.order_id || ':' || a.status, a.order_id, a.activity_id, a.sku_id, a.round, a.user_id, a.status, a.reason,
           a.request_id, a.traceparent,
           CASE WHEN a.status = 'PAID' THEN
               (SELECT p.payment_id FROM payments p WHERE p.order_id = a.order_id AND p.outcome = 'APPLIED') END
      FROM after_update a JOIN before_update b USING (order_id)
     WHERE a.status IS DISTINCT FROM b.status
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;
