-- Order events from the WAL instead of the outbox table. Every change of an
-- order's status still produces its event in the transaction that makes it,
-- by the same triggers and under the same event ids; the event now goes
-- into the write-ahead log as a transactional logical decoding message
-- (`pg_logical_emit_message`, prefix `seckill.order-events`, one JSON array
-- per statement) instead of into `order_events`. The relay reads the
-- messages from a logical replication slot (pgoutput, publication
-- `seckill_order_events`), in commit order, and only of committed
-- transactions: an event of a change that rolled back never exists. The
-- outbox row, its four index entries, the relay's reads of them and the
-- pruning were about as much work again as writing the order.
--
-- The slot and the publication are made before this migration runs
-- (`shared/src/event_stream.rs`: `prepare`, called by every migrate), so
-- no message written after it commits can be missed. The tables whose
-- triggers write events are taken first (SHARE ROW EXCLUSIVE: it waits for
-- the transactions writing them to end, and holds new writers back until
-- this commits), so when it commits no transaction can still write an
-- outbox row. The relay sends the rows `order_events` holds first, and
-- reads the WAL once none is left: one user's events stay in order across
-- the upgrade.

DO $$
BEGIN
    IF current_setting('wal_level') <> 'logical' THEN
        RAISE EXCEPTION 'order events are read from the WAL: PostgreSQL must run with wal_level = logical (it is %)',
            current_setting('wal_level');
    END IF;
END $$;

LOCK TABLE orders, payments, late_payments IN SHARE ROW EXCLUSIVE MODE;

-- The relay's position in the WAL and in the upgrade.
CREATE TABLE IF NOT EXISTS order_events_stream (
    single         BOOLEAN     PRIMARY KEY DEFAULT true CHECK (single),
    -- The outbox holds nothing the relay has yet to send, and never will.
    outbox_drained BOOLEAN     NOT NULL DEFAULT false,
    -- The end of the last transaction whose events were delivered (NULL:
    -- none yet; the slot's own position).
    lsn            pg_lsn,
    -- That transaction's commit time: what a relay that finds its slot
    -- lost sends again from (the orders call for every event since).
    relayed_up_to  TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO order_events_stream DEFAULT VALUES ON CONFLICT (single) DO NOTHING;

-- Events relayed from the WAL, per sale round and type (the outbox's rows
-- and `order_events_pruned` count the rest): the reconciliation's.
CREATE TABLE IF NOT EXISTS order_events_relayed_counts (
    activity_id BIGINT  NOT NULL,
    sku_id      BIGINT  NOT NULL,
    round       INTEGER NOT NULL,
    type        TEXT    NOT NULL,
    count       BIGINT  NOT NULL,
    PRIMARY KEY (activity_id, sku_id, round, type)
);

-- One statement's events, as one message in its transaction (none when the
-- statement changed no status).
CREATE OR REPLACE FUNCTION order_events_emit(events json) RETURNS void LANGUAGE sql AS $$
    SELECT CASE WHEN events IS NOT NULL THEN pg_logical_emit_message(true, 'seckill.order-events', events::text) END;
$$;

-- Each event is an object of the columns the outbox had (occurred_at in
-- milliseconds since the epoch).
CREATE OR REPLACE FUNCTION orders_outbox_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM order_events_emit((SELECT json_agg(e) FROM (
        SELECT n.order_id || ':' || n.status AS event_id, n.status AS type, n.order_id, n.activity_id, n.sku_id,
               n.round, n.user_id, n.reason, (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS occurred_at,
               n.request_id, n.traceparent, NULL::text AS payment_id, r.original_order_id AS redrive_of
          FROM inserted n LEFT JOIN dlq_redrives r ON r.new_order_id = n.order_id) e));
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION orders_outbox_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM order_events_emit((SELECT json_agg(e) FROM (
        SELECT a.order_id || ':' || a.status AS event_id, a.status AS type, a.order_id, a.activity_id, a.sku_id,
               a.round, a.user_id, a.reason, (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS occurred_at,
               a.request_id, a.traceparent,
               CASE WHEN a.status = 'PAID' THEN
                   (SELECT p.payment_id FROM payments p WHERE p.order_id = a.order_id AND p.outcome = 'APPLIED') END
                   AS payment_id,
               r.original_order_id AS redrive_of
          FROM after_update a JOIN before_update b USING (order_id)
          LEFT JOIN dlq_redrives r ON r.new_order_id = a.order_id
         WHERE a.status IS DISTINCT FROM b.status) e));
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM order_events_emit((SELECT json_agg(e) FROM (
        SELECT n.order_id || ':REFUND_DUE:' || n.payment_id AS event_id, 'REFUND_DUE' AS type, n.order_id,
               n.activity_id, n.sku_id, n.round, n.user_id, n.refund_reason AS reason,
               (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS occurred_at, NULL::text AS request_id,
               NULL::text AS traceparent, n.payment_id, NULL::text AS redrive_of
          FROM inserted n
         WHERE n.outcome = 'REFUND_DUE' AND n.round IS NOT NULL AND n.payment_id NOT LIKE 'legacy:%') e));
    RETURN NULL;
END $$;

-- An order paid late has one PAYMENT_LATE event: for its first late
-- payment (the outbox's unique event id kept the later ones out; here, an
-- order whose late payments are all in this statement).
CREATE OR REPLACE FUNCTION late_payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM order_events_emit((SELECT json_agg(e) FROM (
        SELECT DISTINCT ON (n.order_id) n.order_id || ':PAYMENT_LATE' AS event_id, 'PAYMENT_LATE' AS type, n.order_id,
               n.activity_id, n.sku_id, n.round, n.user_id, 'ORDER_CANCELLED' AS reason,
               (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS occurred_at, NULL::text AS request_id,
               NULL::text AS traceparent, NULL::text AS payment_id, NULL::text AS redrive_of
          FROM inserted n
         WHERE (SELECT count(*) FROM late_payments l WHERE l.order_id = n.order_id)
             = (SELECT count(*) FROM inserted i WHERE i.order_id = n.order_id)) e));
    RETURN NULL;
END $$;
