-- The relay remembers how far it got instead of marking every row it sent.
-- Marking (`UPDATE … SET relayed_at`) rewrote each outbox row and every
-- index entry of it once more: about as much work as writing the order in
-- the first place, and the largest part of what relaying cost the drain.
--
-- Each outbox row now carries the transaction that wrote it (`xid`), and
-- the relay reads rows in (xid, id) order, only from transactions older
-- than the oldest one still running (`pg_snapshot_xmin`): no row can appear
-- behind such a position any more, so a single cursor row — the last
-- (xid, id) delivered — says what was relayed. A row below the cursor was
-- relayed; a row above it is pending. Every status change of an order is
-- made by a transaction whose first write is to that order's row, which
-- exists only once the previous change committed: its xid is the larger
-- one, so one order's events still leave in the order they happened.
-- A transaction left open (idle in transaction) holds relaying back, not
-- writing, until it ends.
-- A relay of the previous version (one that marks rows) fails on the
-- dropped column and sends nothing more: upgrade the order services, and
-- the new relay takes over where the marks ended.

ALTER TABLE order_events ADD COLUMN IF NOT EXISTS xid xid8 NOT NULL DEFAULT pg_current_xact_id();

CREATE TABLE IF NOT EXISTS order_events_relayed (
    single BOOLEAN PRIMARY KEY DEFAULT true CHECK (single),
    xid    xid8    NOT NULL,
    id     BIGINT  NOT NULL
);

-- The rows written before this migration all carry its xid: those already
-- marked are behind the cursor, the first unmarked one and all after it
-- ahead of it (a marked row among them is sent again: at least once).
INSERT INTO order_events_relayed (xid, id)
SELECT pg_current_xact_id(),
       COALESCE((SELECT min(id) - 1 FROM order_events WHERE relayed_at IS NULL), (SELECT max(id) FROM order_events), 0)
ON CONFLICT (single) DO NOTHING;

DROP INDEX IF EXISTS order_events_unrelayed;
ALTER TABLE order_events DROP COLUMN IF EXISTS relayed_at;
CREATE INDEX IF NOT EXISTS order_events_relay_order ON order_events (xid, id);
