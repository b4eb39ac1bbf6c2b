-- The order lifecycle: a CREATED order awaits payment until its deadline
-- (created + the sale's payment window), then is PAID or CANCELLED. Every
-- transition is a guarded update (`WHERE status = 'CREATED'`): one winner.
-- A CANCELLED order's unit goes back to its own round, in PostgreSQL in the
-- cancelling transaction and in Redis afterwards (`unit_returned_at` marks
-- when Redis had it; a cancel that crashed in between is finished by the
-- compensator's deadline worker).

ALTER TABLE sales ADD COLUMN IF NOT EXISTS payment_window_seconds INTEGER NOT NULL DEFAULT 900
    CHECK (payment_window_seconds > 0);

ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check
    CHECK (status IN ('CREATED', 'FAILED', 'PAID', 'CANCELLED'));
-- FAILED and CANCELLED orders say why (CANCELLED: EXPIRED or BUYER_CANCELLED).
ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_reason_only_when_failed;
ALTER TABLE orders ADD CONSTRAINT orders_reason_when_failed_or_cancelled
    CHECK ((status IN ('FAILED', 'CANCELLED')) = (reason IS NOT NULL));

ALTER TABLE orders ADD COLUMN IF NOT EXISTS pay_deadline TIMESTAMPTZ;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS paid_at TIMESTAMPTZ;
-- The payment confirmation's Idempotency-Key: a repeat answers the same.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS payment_key TEXT;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS cancelled_at TIMESTAMPTZ;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS unit_returned_at TIMESTAMPTZ;

-- One live order per user per round: a PAID order counts, a CANCELLED one
-- lets the user buy again.
DROP INDEX IF EXISTS orders_one_created_per_user;
CREATE UNIQUE INDEX IF NOT EXISTS orders_one_live_per_user
    ON orders (activity_id, sku_id, round, user_id) WHERE status IN ('CREATED', 'PAID');

-- The deadline worker reads only what is due, in deadline order, and the
-- cancels whose unit Redis has not taken back yet.
CREATE INDEX IF NOT EXISTS orders_awaiting_payment ON orders (pay_deadline) WHERE status = 'CREATED';
CREATE INDEX IF NOT EXISTS orders_unit_to_return ON orders (cancelled_at) WHERE status = 'CANCELLED' AND unit_returned_at IS NULL;

-- Payments that arrived after their order was cancelled: to be refunded.
CREATE TABLE IF NOT EXISTS late_payments (
    order_id     TEXT        NOT NULL,
    -- '' when the confirmation carried no Idempotency-Key.
    payment_key  TEXT        NOT NULL DEFAULT '',
    user_id      BIGINT      NOT NULL,
    activity_id  BIGINT      NOT NULL,
    sku_id       BIGINT      NOT NULL,
    round        INTEGER     NOT NULL,
    recorded_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    refunded_at  TIMESTAMPTZ,
    PRIMARY KEY (order_id, payment_key)
);
CREATE INDEX IF NOT EXISTS late_payments_by_sale ON late_payments (activity_id, sku_id, round);

-- An order paid late has one PAYMENT_LATE event (its first late payment),
-- in the same transaction.
CREATE OR REPLACE FUNCTION late_payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason)
    SELECT DISTINCT ON (n.order_id) n.order_id || ':PAYMENT_LATE', n.order_id, n.activity_id, n.sku_id, n.round, n.user_id,
           'PAYMENT_LATE', 'ORDER_CANCELLED'
      FROM inserted n
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS late_payments_outbox ON late_payments;
CREATE TRIGGER late_payments_outbox AFTER INSERT ON late_payments
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION late_payments_outbox();
