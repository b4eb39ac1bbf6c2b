-- Status look-ups by user (GET /api/seckill/result falling back to
-- PostgreSQL) find a user's orders in a sale, whatever their status.
CREATE INDEX IF NOT EXISTS orders_by_user ON orders (activity_id, sku_id, user_id);
