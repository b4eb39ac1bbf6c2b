-- Leases: singletons elected in PostgreSQL itself (the order-event relay,
-- whose cursor is this database's). A holder takes the row when it is free
-- or expired, with a fencing token one above the last; it renews the
-- expiry while it lives, and a holder that stops renewing (frozen, cut off
-- without a reset, dead) loses the lease after its length, on the
-- database's own clock. Every write the lease guards checks, in its own
-- transaction, that the lease is still the holder's (shared/src/lease.rs).
--
-- Replaces the relay's session advisory lock, which a frozen holder kept
-- for as long as its connection stayed open (hours without TCP
-- keepalives). Locks: creates one table; nothing else is touched. Old
-- binaries keep working beside it (they still take the advisory lock,
-- which new relays no longer look at: upgrade the order services together,
-- or two relays may send events at once — duplicates, which consumers drop
-- by eventId, never a loss).
CREATE TABLE IF NOT EXISTS leases (
    name       TEXT        PRIMARY KEY,
    holder     TEXT        NOT NULL,
    fence      BIGINT      NOT NULL CHECK (fence > 0),
    expires_at TIMESTAMPTZ NOT NULL
);
