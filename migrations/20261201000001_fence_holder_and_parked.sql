-- The fencing check tells two holders with the same token apart (a Redis
-- that lost its counter can mint a token again): the same token is
-- accepted from the holder that wrote it only.
ALTER TABLE lock_fences ADD COLUMN IF NOT EXISTS holder TEXT;

-- Records no service could process after bounded attempts (a dead letter
-- PostgreSQL can never take, a record too large to dead-letter), parked so
-- the partition behind them moves on. Each stays until an operator deals
-- with it; the reconciliation reports those of a sale as violations.
CREATE TABLE IF NOT EXISTS parked_records (
    id          BIGSERIAL   PRIMARY KEY,
    topic       TEXT        NOT NULL,
    partition   INTEGER     NOT NULL,
    "offset"    BIGINT      NOT NULL,
    key         BYTEA,
    payload     BYTEA,
    headers     JSONB       NOT NULL DEFAULT '{}',
    -- Decoded from the payload when it could be: which order, which sale.
    order_id    TEXT,
    activity_id BIGINT,
    sku_id      BIGINT,
    reason      TEXT        NOT NULL,
    error       TEXT        NOT NULL,
    attempts    INTEGER     NOT NULL,
    parked_by   TEXT        NOT NULL,
    parked_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (topic, partition, "offset")
);
CREATE INDEX IF NOT EXISTS parked_records_by_sale ON parked_records (activity_id, sku_id);
