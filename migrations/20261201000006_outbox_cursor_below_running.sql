-- The relay's cursor starts below every transaction still running when
-- 20261201000004 ran. That migration gave the rows written before it, and
-- the cursor, its own transaction id M: a transaction that began before it
-- (its id, below M, taken by the stock update every batch makes first) and
-- wrote its event after it landed behind the cursor — never relayed, and
-- counted as relayed. Run right after 04 (the same upgrade), this moves M's
-- rows and the cursor to xid '1', older than any transaction: the order
-- among M's rows and against every later transaction stays as it was, and
-- an event of a transaction that ran across 04 is now ahead of the cursor.
--
-- Only while the cursor is still inside M's rows (M is the xid of the oldest
-- row: nothing was relayed past them yet). A database whose relay has moved
-- on since is left as it is: `seckillctl events verify` finds an event lost
-- that way, `seckillctl events resend` sends it.
--
-- Locks: the rows of M in order_events (an UPDATE), and the cursor row.
-- Old binaries keep working: the relay of the previous version reads the
-- same columns (it may relay M's pending rows again: at least once).
WITH m AS (
    SELECT r.xid FROM order_events_relayed r
     WHERE r.xid = (SELECT xid FROM order_events ORDER BY id LIMIT 1)
       AND r.xid <> '1'::xid8
), moved AS (
    -- A data-modifying CTE runs whether or not it is read; both updates see
    -- the rows as they were.
    UPDATE order_events SET xid = '1' WHERE xid = (SELECT xid FROM m)
)
UPDATE order_events_relayed SET xid = '1' WHERE xid = (SELECT xid FROM m);
