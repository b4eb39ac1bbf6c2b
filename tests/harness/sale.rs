//! A test's sale as Redis and PostgreSQL hold it: warming it up,
//! deducting as the edge would, waiting for its orders.

use crate::{eventually, TestEnv, CALL_DEADLINE};
use seckill_shared::config::LockSettings;
use seckill_shared::domain::{Limits, OrderId, OrderRecord, SaleKey, UserId};
use seckill_shared::ops::lock::LockClient;
use seckill_shared::ops::shutdown::Background;
use std::time::Duration;

impl TestEnv {
    /// Warms a sale up with `stock` units through the shared warm-up code.
    pub async fn warmup(&self, sale: SaleKey, stock: i64) {
        self.warmup_with_window(sale, stock, seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS).await;
    }

    /// Warms `sale` up with `stock` units and a payment window of `window` s.
    pub async fn warmup_with_window(&self, sale: SaleKey, stock: i64, window: i64) {
        self.warmup_round(sale, stock, window, 1, true).await.expect("warming up");
    }

    /// Warms `sale` up with `stock` units spread over `buckets` buckets
    /// (`force`: even with orders in flight).
    pub async fn warmup_round(
        &self,
        sale: SaleKey,
        stock: i64,
        window: i64,
        buckets: u32,
        force: bool,
    ) -> Result<seckill_shared::db::SaleRow, seckill_shared::sales::WarmupError> {
        self.warmup_request(sale, stock, window, buckets, force, Limits::default()).await
    }

    /// Warms `sale` up with `stock` units (one bucket, a payment window of
    /// `window` s) and `limits` of units per user and per order.
    pub async fn warmup_limited(&self, sale: SaleKey, stock: i64, window: i64, limits: Limits) {
        self.warmup_request(sale, stock, window, 1, true, limits).await.expect("warming up");
    }

    /// Warms `sale` up through the shared warm-up code, every field named.
    pub async fn warmup_request(
        &self,
        sale: SaleKey,
        stock: i64,
        window: i64,
        buckets: u32,
        force: bool,
        limits: Limits,
    ) -> Result<seckill_shared::db::SaleRow, seckill_shared::sales::WarmupError> {
        let request = seckill_shared::sales::WarmupRequest {
            payment_window_seconds: window,
            buckets,
            limits,
            ..plain_warmup(sale, stock, force)
        };
        self.run_warmup(&request).await
    }

    /// Runs `request` through the shared warm-up code, as the edge's admin
    /// API would.
    pub async fn run_warmup(
        &self,
        request: &seckill_shared::sales::WarmupRequest,
    ) -> Result<seckill_shared::db::SaleRow, seckill_shared::sales::WarmupError> {
        let locks = LockClient::new(self.stock.connection(), Background::default());
        seckill_shared::sales::warmup(&self.stock, &self.db, CALL_DEADLINE, &locks, &LockSettings::warmup(), request)
            .await
    }

    /// Deducts a unit for `user` as the edge would, without publishing (an
    /// edge that died right after the deduction), and returns the record
    /// the edge would have sent. The publish deadline is 5 s (as an edge
    /// with a 3 s delivery timeout): the sweeper settles the order after
    /// that, not before a test has sent its record or dead letter.
    pub async fn deduct(&self, sale: SaleKey, user: i64) -> OrderRecord {
        self.try_deduct(sale, user).await.unwrap_or_else(|other| panic!("deduction refused: {other:?}"))
    }

    /// [`TestEnv::deduct`], or what the deduction answered instead.
    pub async fn try_deduct(&self, sale: SaleKey, user: i64) -> Result<OrderRecord, seckill_shared::stock::Deduction> {
        self.try_deduct_units(sale, user, 1).await
    }

    /// [`TestEnv::try_deduct`] of `quantity` units.
    pub async fn try_deduct_units(
        &self,
        sale: SaleKey,
        user: i64,
        quantity: u32,
    ) -> Result<OrderRecord, seckill_shared::stock::Deduction> {
        let user = UserId::new(user).expect("positive user");
        let nonce = format!("{:016x}", rand::random::<u64>());
        // Right after a Redis failover the first call on the old connection
        // fails while the connection finds the new primary.
        let deduction = eventually("a deduction", Duration::from_secs(30), || async {
            self.stock
                .orders()
                .deduct(sale, user, quantity, &nonce, Duration::from_secs(5))
                .await
                .map_err(|e| e.to_string())
        })
        .await;
        match deduction {
            seckill_shared::stock::Deduction::Accepted { order_id, round, accepted_at, slot, .. } => {
                Ok(OrderRecord::new(order_id, sale, user, accepted_at).in_round(round).holding(quantity, slot))
            }
            other => Err(other),
        }
    }

    /// Waits (two minutes at most) until the sale has `n` orders of `status`.
    pub async fn wait_orders(&self, sale: SaleKey, status: &str, n: i64) {
        eventually(&format!("{n} orders {status}"), Duration::from_secs(120), || async {
            let found = self.count_orders(sale, status).await;
            if found == n {
                Ok(())
            } else {
                Err(format!("{found} of {n}"))
            }
        })
        .await;
    }

    /// Waits up to `within` until the order's row has `want` (status, reason).
    pub async fn wait_status(&self, order_id: &OrderId, want: (&str, Option<&str>), within: Duration) {
        eventually(&format!("order {order_id} {want:?}"), within, || async {
            match self.order_row(order_id).await {
                Some((status, reason)) if (status.as_str(), reason.as_deref()) == want => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    /// The newest fencing token PostgreSQL recorded for `lock`.
    pub async fn fence_of(&self, lock: &str) -> i64 {
        seckill_shared::ops::fence::newest(&self.db, lock).await.expect("the fences")
    }

    /// Orders in PostgreSQL for the sale, by status.
    pub async fn count_orders(&self, sale: SaleKey, status: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE activity_id = $1 AND sku_id = $2 AND status = $3")
            .bind(sale.activity.get())
            .bind(sale.sku.get())
            .bind(status)
            .fetch_one(&self.db)
            .await
            .expect("counting orders")
    }

    /// Redis stock of the sale.
    pub async fn redis_stock(&self, sale: SaleKey) -> i64 {
        self.stock.books().snapshot(sale).await.expect("reading redis").remaining
    }

    /// An order's row: its status and reason, if it has one.
    pub async fn order_row(&self, order_id: &OrderId) -> Option<(String, Option<String>)> {
        sqlx::query_as("SELECT status, reason FROM orders WHERE order_id = $1")
            .bind(order_id.as_str())
            .fetch_optional(&self.db)
            .await
            .expect("reading an order row")
    }

    /// Checks the events topic as a consumer would (`seckillctl events
    /// verify`): every event the sale's orders call for is there, each
    /// order's in order, waiting up to a minute for the relay.
    pub async fn verify_events(&self, sale: SaleKey) {
        let (a, s) = (sale.activity.to_string(), sale.sku.to_string());
        let verify = self.ctl(&["events", "verify", "--activity", &a, "--sku", &s, "--wait-drain", "60"]).await;
        assert_eq!(verify.code, 0, "the events topic lacks events of sale {sale}:\n{}{}", verify.stdout, verify.stderr);
    }

    /// CREATED orders of `sale` for `users`, written as an older order service
    /// (or a tool) writes them — without their record's position — so their
    /// CREATED events go through the outbox and the relay; their order ids.
    pub async fn created_through_the_outbox(&self, sale: SaleKey, users: std::ops::Range<i64>) -> Vec<String> {
        sqlx::query_scalar(
            "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at)
             SELECT $1 || '-' || $2 || '-' || u || '-' || lpad(to_hex(u), 16, '0'), $1, $2, s.round, u, 'CREATED', now()
               FROM generate_series($3::bigint, $4::bigint - 1) AS u, sales s
              WHERE s.activity_id = $1 AND s.sku_id = $2
             RETURNING order_id",
        )
        .bind(sale.activity.get())
        .bind(sale.sku.get())
        .bind(users.start)
        .bind(users.end)
        .fetch_all(&self.db)
        .await
        .expect("orders written")
    }
}

/// A warm-up of `sale` with `stock` units and nothing else: a payment
/// window of 900 s, one bucket, no room, no draw, no limits.
pub fn plain_warmup(sale: SaleKey, stock: i64, force: bool) -> seckill_shared::sales::WarmupRequest {
    seckill_shared::sales::WarmupRequest {
        id: None,
        sale,
        stock,
        starts_at: None,
        ends_at: None,
        force,
        payment_window_seconds: 900,
        buckets: 1,
        admission: None,
        draw: None,
        limits: Default::default(),
    }
}
