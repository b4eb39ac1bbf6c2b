-- orders_by_sale (activity, sku, round, status) and orders_by_user
-- (activity, sku, user) become one index on (activity, sku, round, user):
-- the books' per-round counts and lists read its (activity, sku, round)
-- prefix, the buyer's result lookup (the sale's current round, a user) its
-- whole key, seckillctl events' per-sale read its (activity, sku) prefix.
-- Every order written pays one index fewer: 100-row batch inserts
-- (pgbench, 8 clients) went from 1,415-1,493 to 1,834-1,862 a second.
--
-- The drops come first: the first takes ACCESS EXCLUSIVE on orders before
-- anything else, so the build runs under it. Built first, the index would
-- hold SHARE and the drops would then ask for more while order writers
-- queue behind it: under a sale that deadlocked (make upgrade-test).
DROP INDEX IF EXISTS orders_by_sale;
DROP INDEX IF EXISTS orders_by_user;
CREATE INDEX IF NOT EXISTS orders_by_round_user ON orders (activity_id, sku_id, round, user_id);
