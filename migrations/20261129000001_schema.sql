-- The durable record of every sale and order. PostgreSQL decides each order's
-- fate: the first row written for an order id wins (CREATED by the order
-- service, FAILED by the compensator or the reservation sweeper).

CREATE TABLE IF NOT EXISTS sales (
    activity_id     BIGINT      NOT NULL CHECK (activity_id > 0),
    sku_id          BIGINT      NOT NULL CHECK (sku_id > 0),
    -- A warm-up starts a new round: stock is set (never added) and buyers of
    -- the previous round may buy again.
    round           INTEGER     NOT NULL DEFAULT 1 CHECK (round > 0),
    total_stock     BIGINT      NOT NULL CHECK (total_stock >= 0),
    -- The database-side stock guard: no order is written past this.
    remaining_stock BIGINT      NOT NULL CHECK (remaining_stock >= 0),
    starts_at       TIMESTAMPTZ,
    ends_at         TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (activity_id, sku_id),
    CONSTRAINT sales_remaining_within_total CHECK (remaining_stock <= total_stock),
    CONSTRAINT sales_window_ordered CHECK (starts_at IS NULL OR ends_at IS NULL OR starts_at < ends_at)
);

CREATE TABLE IF NOT EXISTS orders (
    order_id    TEXT        PRIMARY KEY,
    activity_id BIGINT      NOT NULL,
    sku_id      BIGINT      NOT NULL,
    round       INTEGER     NOT NULL,
    user_id     BIGINT      NOT NULL,
    status      TEXT        NOT NULL CHECK (status IN ('CREATED', 'FAILED')),
    -- Why an order FAILED: a dlq.reason code, or PUBLISH_LOST from the sweeper.
    reason      TEXT,
    accepted_at TIMESTAMPTZ,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT orders_reason_only_when_failed CHECK ((status = 'FAILED') = (reason IS NOT NULL))
);

-- One order per user per sale round: the database enforces it too.
CREATE UNIQUE INDEX IF NOT EXISTS orders_one_created_per_user
    ON orders (activity_id, sku_id, round, user_id) WHERE status = 'CREATED';

CREATE INDEX IF NOT EXISTS orders_by_sale ON orders (activity_id, sku_id, round, status);

-- Fencing tokens of the distributed lock: a write guarded by a lock carries
-- its token, and one with a token lower than the last seen is refused.
CREATE TABLE IF NOT EXISTS lock_fences (
    name       TEXT        PRIMARY KEY,
    token      BIGINT      NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
