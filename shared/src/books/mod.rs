//! Reconciliation of one sale (docs/guarantees.md): reads Redis, PostgreSQL
//! and the consumer groups' lag, and checks the invariant
//!
//! `total_stock = redis_remaining + orders_created + orders_paid + orders_in_flight`,
//! `orders_created + orders_paid ≤ total_stock`, no user with two live
//! orders, compensated (or written-off) units equal to the FAILED orders
//! Redis had accepted, returned units equal to the CANCELLED orders Redis
//! had accepted, and PostgreSQL's
//! `remaining_stock = total_stock − orders_created − orders_paid`.
//!
//! `seckillctl reconcile` and `GET /admin/sales/{a}/{s}` both serve this.

use crate::config::KafkaSettings;
use crate::domain::SaleKey;
use crate::stock::{SaleSnapshot, Stock};
use sqlx::PgPool;
use std::collections::BTreeMap;

/// Every term of the invariant, and the verdict (`GET /admin/sales/{a}/{s}`
/// answers it; `seckillctl reconcile --json` prints it).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Reconciliation)]
pub struct Report {
    pub activity_id: i64,
    pub sku_id: i64,
    /// Warm-up round (PostgreSQL).
    pub round: i32,
    /// Units on sale (PostgreSQL).
    pub total_stock: i64,
    /// Units left in Redis.
    pub redis_remaining: i64,
    /// Units the database can still write (PostgreSQL).
    pub db_remaining: i64,
    /// CREATED orders this round (awaiting payment).
    pub orders_created: i64,
    /// PAID orders this round.
    pub orders_paid: i64,
    /// CANCELLED orders this round (not paid in time, or by the buyer).
    pub orders_cancelled: i64,
    /// CANCELLED orders by reason.
    pub cancelled_by_reason: BTreeMap<String, i64>,
    /// Of the CANCELLED orders, those whose unit Redis has not been seen to
    /// take back yet (the deadline worker finishes them).
    pub cancels_pending: i64,
    /// Units cancelled orders gave back in Redis.
    pub returned: i64,
    /// CANCELLED orders Redis had accepted (each must have given its unit
    /// back).
    pub cancelled_accepted: i64,
    /// Orders with a payment that came after their cancellation before the
    /// payments ledger (one PAYMENT_LATE event each).
    pub orders_paid_late: i64,
    /// Payments the ledger applied (each made one order PAID): as many as
    /// the PAID orders.
    pub payments_applied: i64,
    /// Payments owed back and not refunded yet (`seckillctl payments refunds`).
    pub refunds_due: i64,
    /// Payments owed back, refunded or not, that have a REFUND_DUE event.
    pub refund_events: i64,
    /// FAILED orders this round.
    pub orders_failed: i64,
    /// FAILED orders by reason.
    pub failed_by_reason: BTreeMap<String, i64>,
    /// Orders accepted but not yet settled (QUEUED in Redis).
    pub orders_in_flight: i64,
    /// Of those, reservations the order service has not seen yet.
    pub reservations: i64,
    /// Users holding an order in Redis.
    pub buyers: i64,
    /// Units restored for FAILED orders.
    pub compensated: i64,
    /// Units written off (the database never had them).
    pub written_off: i64,
    /// FAILED orders that Redis had accepted (each must be compensated or
    /// written off).
    pub failed_accepted: i64,
    /// Broken promises: FAILED orders whose buyer had been answered 202 —
    /// they came through the edge (their record carried its request id) or
    /// Redis accepted them — by reason. A part failing must never end a
    /// promised order FAILED: this reads 0.
    pub broken_promises: BTreeMap<String, i64>,
    /// Of this round's FAILED orders, those `seckillctl dlq redrive` placed
    /// again for their buyer (a broken promise mended by an operator).
    pub redriven: i64,
    /// Live (CREATED or PAID) orders beyond one per user (always 0 unless
    /// the schema is broken).
    pub duplicate_users: i64,
    /// This sale's records parked for an operator (never settled).
    pub parked: i64,
    /// Order events of this round written (relayed, pending or pruned):
    /// one per order and state.
    pub events: i64,
    /// Of those, not yet relayed to `seckill.order-events`.
    pub events_pending: i64,
    /// When the balance is off: CREATED orders Redis holds no status for —
    /// deductions Redis acknowledged and then lost (a restart without the
    /// last writes, a failover to a replica that had not received them).
    /// Not read when the balance holds.
    pub created_unknown_to_redis: Option<i64>,
    /// The order service's lag on the orders topic (all sales).
    pub order_lag: Option<i64>,
    /// The compensator's lag on the dead-letter topic (all sales).
    pub compensator_lag: Option<i64>,
    /// Redis's own view of the sale.
    pub redis: SaleSnapshot,
    /// The sale's last warm-up when it is not finished (its caller or its
    /// process stopped short, or the replicas did not confirm it): repeat
    /// it — the same `warmupId` (`seckillctl warmup --id`) — to finish it.
    pub unfinished_warmup: Option<UnfinishedWarmup>,
    /// Whether every check holds.
    pub consistent: bool,
    /// Each failed check, in words, naming the terms that disagree.
    pub violations: Vec<String>,
}

/// A warm-up that stopped short.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnfinishedWarmup {
    pub warmup_id: String,
    /// `STARTED` (its buckets held still) or `COMMITTED` (its round is
    /// PostgreSQL's; Redis partly loaded).
    pub step: String,
    /// Its round, once committed.
    pub round: Option<i32>,
    /// Why its last run stopped, when known.
    pub error: Option<String>,
    pub started_at: chrono::DateTime<chrono::Utc>,
}

impl Report {
    /// Whether nothing is in flight anywhere (events relayed too).
    pub fn drained(&self) -> bool {
        self.orders_in_flight == 0
            && self.order_lag.unwrap_or(0) == 0
            && self.compensator_lag.unwrap_or(0) == 0
            && self.events_pending == 0
            && self.cancels_pending == 0
    }
}

/// Why a reconciliation could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The sale is not in PostgreSQL.
    #[error("sale {0} not found")]
    SaleNotFound(SaleKey),
    /// A source could not be read.
    #[error("could not read {source_name}: {error:#}")]
    Source {
        /// `redis`, `postgresql` or `kafka`.
        source_name: &'static str,
        /// Why.
        #[source]
        error: anyhow::Error,
    },
}

fn source<E: Into<anyhow::Error>>(source_name: &'static str) -> impl Fn(E) -> ReconcileError {
    move |error| ReconcileError::Source { source_name, error: error.into() }
}

/// Reconciles one sale. `require_drained` makes orders still in flight a
/// violation (use it after waiting for the pipeline to drain).
pub async fn reconcile(
    stock: &Stock,
    pool: &PgPool,
    kafka_settings: Option<&KafkaSettings>,
    sale: SaleKey,
    require_drained: bool,
) -> Result<Report, ReconcileError> {
    let pg = source::<sqlx::Error>("postgresql");
    let redis = source::<crate::stock::conn::RedisCallError>("redis");
    let row = crate::db::find_sale(pool, sale).await.map_err(&pg)?.ok_or(ReconcileError::SaleNotFound(sale))?;
    let snapshot = stock.snapshot(sale).await.map_err(&redis)?;

    // Per status and reason: how many, and (FAILED and CANCELLED) which
    // orders — each of those Redis had accepted must have had its unit
    // restored, written off or given back.
    let (activity, sku, round) = (sale.activity.get(), sale.sku.get(), row.round);
    let by_status = sqlx::query!(
        r#"SELECT status, reason, count(*) AS "count!",
                  count(*) FILTER (WHERE status = 'CANCELLED' AND unit_returned_at IS NULL) AS "pending!"
             FROM orders
            WHERE activity_id = $1 AND sku_id = $2 AND round = $3
            GROUP BY status, reason"#,
        activity,
        sku,
        round
    )
    .fetch_all(pool)
    .await
    .map_err(&pg)?;
    let (mut created, mut paid, mut failed, mut cancelled, mut cancels_pending) = (0, 0, 0, 0, 0);
    let (mut failed_by_reason, mut cancelled_by_reason) = (BTreeMap::new(), BTreeMap::new());
    for by in by_status {
        let (reason, count, pending) = (by.reason, by.count, by.pending);
        match by.status.as_str() {
            "CREATED" => created += count,
            "PAID" => paid += count,
            "CANCELLED" => {
                cancelled += count;
                cancels_pending += pending;
                *cancelled_by_reason.entry(reason.unwrap_or_default()).or_insert(0) += count;
            }
            _ => {
                failed += count;
                *failed_by_reason.entry(reason.unwrap_or_default()).or_insert(0) += count;
            }
        }
    }
    // Users with two live orders, orders paid late, and the round's events
    // (written, relayed or not, and pruned) and those not relayed yet.
    let terms = sqlx::query!(
        r#"SELECT (SELECT count(*) - count(DISTINCT user_id) FROM orders
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status IN ('CREATED', 'PAID')) AS "duplicate_users!",
                  (SELECT count(DISTINCT order_id) FROM late_payments
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3) AS "paid_late!",
                  (SELECT count(*) FROM payments
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND outcome = 'APPLIED') AS "applied!",
                  (SELECT count(*) FROM payments
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND outcome = 'REFUND_DUE'
                      AND refunded_at IS NULL) AS "refunds_due!",
                  (SELECT count(*) FROM payments
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND outcome = 'REFUND_DUE'
                      AND payment_id NOT LIKE 'legacy:%') AS "refund_events!",
                  (SELECT count(*) FROM order_events WHERE activity_id = $1 AND sku_id = $2 AND round = $3)
                + (SELECT COALESCE(sum(count), 0)::bigint FROM order_events_pruned
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3) AS "events!",
                  (SELECT count(*) FROM order_events
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3
                      AND (xid, id) > (SELECT xid, id FROM order_events_relayed)) AS "events_pending!""#,
        activity,
        sku,
        round
    )
    .fetch_one(pool)
    .await
    .map_err(&pg)?;
    let (duplicate_users, orders_paid_late, events, events_pending) =
        (terms.duplicate_users, terms.paid_late, terms.events, terms.events_pending);
    // Which of the round's FAILED and CANCELLED orders Redis had accepted:
    // their ids streamed from PostgreSQL and asked of Redis a chunk at a
    // time, so a round of a million orders costs a chunk of memory, not a
    // million ids.
    let (_, failed_accepted) = known_to_redis(
        stock,
        sale,
        sqlx::query_scalar!(
            "SELECT order_id FROM orders WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status = 'FAILED'",
            activity,
            sku,
            round
        )
        .fetch(pool),
    )
    .await?;
    let (broken_promises, redriven) = broken_promises(stock, pool, sale, round).await?;
    let (_, cancelled_accepted) = known_to_redis(
        stock,
        sale,
        sqlx::query_scalar!(
            "SELECT order_id FROM orders
              WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status = 'CANCELLED'",
            activity,
            sku,
            round
        )
        .fetch(pool),
    )
    .await?;
    let parked = crate::db::parked::count_for_sale(pool, sale).await.map_err(&pg)?;

    let (order_lag, compensator_lag) = match kafka_settings {
        Some(settings) => {
            let lag = crate::kafka::pipeline_lag(settings).await.map_err(source("kafka"))?;
            (Some(lag.order.total), Some(lag.compensator.total))
        }
        None => (None, None),
    };

    let mut report = Report {
        activity_id: sale.activity.get(),
        sku_id: sale.sku.get(),
        round: row.round,
        total_stock: row.total_stock,
        redis_remaining: snapshot.remaining,
        db_remaining: row.remaining_stock,
        orders_created: created,
        orders_paid: paid,
        orders_cancelled: cancelled,
        cancelled_by_reason,
        cancels_pending,
        returned: snapshot.returned,
        cancelled_accepted,
        orders_paid_late,
        payments_applied: terms.applied,
        refunds_due: terms.refunds_due,
        refund_events: terms.refund_events,
        orders_failed: failed,
        failed_by_reason,
        orders_in_flight: snapshot.queued,
        reservations: snapshot.reservations,
        buyers: snapshot.buyers,
        compensated: snapshot.compensated,
        written_off: snapshot.written_off,
        failed_accepted,
        broken_promises,
        redriven,
        duplicate_users,
        parked,
        events,
        events_pending,
        created_unknown_to_redis: None,
        order_lag,
        compensator_lag,
        redis: snapshot,
        unfinished_warmup: crate::sales::record::unfinished(pool, sale).await.map_err(&pg)?.map(|w| UnfinishedWarmup {
            warmup_id: w.id,
            step: w.step.as_str().to_owned(),
            round: w.round,
            error: w.error,
            started_at: w.started_at,
        }),
        consistent: false,
        violations: Vec::new(),
    };
    if report.balance() != report.total_stock {
        // Explain the difference: which live orders Redis lost.
        let (live, known) = known_to_redis(
            stock,
            sale,
            sqlx::query_scalar!(
                "SELECT order_id FROM orders
                  WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status IN ('CREATED', 'PAID')",
                activity,
                sku,
                round
            )
            .fetch(pool),
        )
        .await?;
        report.created_unknown_to_redis = Some(live - known);
    }
    report.judge(require_drained);
    Ok(report)
}

/// The FAILED orders of a round whose buyer was answered 202, by reason:
/// those whose record came through the edge (it carries the request's id),
/// and of the others those Redis accepted; and how many of the round's
/// FAILED orders a redrive placed again (one scan of them for both).
async fn broken_promises(
    stock: &Stock,
    pool: &PgPool,
    sale: SaleKey,
    round: i32,
) -> Result<(BTreeMap<String, i64>, i64), ReconcileError> {
    let reasons = sqlx::query!(
        r#"SELECT o.reason AS "reason!", count(*) FILTER (WHERE o.request_id IS NOT NULL) AS "via_edge!",
                  count(r.new_order_id) AS "redriven!"
             FROM orders o LEFT JOIN dlq_redrives r ON r.original_order_id = o.order_id
            WHERE o.activity_id = $1 AND o.sku_id = $2 AND o.round = $3 AND o.status = 'FAILED'
            GROUP BY o.reason"#,
        sale.activity.get(),
        sale.sku.get(),
        round
    )
    .fetch_all(pool)
    .await
    .map_err(source::<sqlx::Error>("postgresql"))?;
    let mut broken = BTreeMap::new();
    let redriven = reasons.iter().map(|row| row.redriven).sum();
    for row in reasons {
        let (_, accepted) = known_to_redis(
            stock,
            sale,
            sqlx::query_scalar!(
                "SELECT order_id FROM orders
                  WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status = 'FAILED' AND reason = $4
                    AND request_id IS NULL",
                sale.activity.get(),
                sale.sku.get(),
                round,
                row.reason
            )
            .fetch(pool),
        )
        .await?;
        let count = row.via_edge + accepted;
        if count > 0 {
            broken.insert(row.reason, count);
        }
    }
    Ok((broken, redriven))
}

/// Order ids streamed from PostgreSQL and asked of Redis a chunk at a time.
const KNOWN_CHUNK: usize = 10_000;

/// How many order ids `ids` streams, and how many of them Redis holds a
/// status for.
async fn known_to_redis(
    stock: &Stock,
    sale: SaleKey,
    ids: impl futures::Stream<Item = sqlx::Result<String>>,
) -> Result<(i64, i64), ReconcileError> {
    use futures::TryStreamExt;
    let mut chunks = std::pin::pin!(ids.try_chunks(KNOWN_CHUNK));
    let (mut seen, mut known) = (0, 0);
    while let Some(chunk) = chunks.try_next().await.map_err(|error| source::<sqlx::Error>("postgresql")(error.1))? {
        seen += chunk.len() as i64;
        known += stock
            .count_known_orders(sale, &chunk)
            .await
            .map_err(source::<crate::stock::conn::RedisCallError>("redis"))?;
    }
    Ok((seen, known))
}

/// The most sales [`reconcile_live`] reports on.
pub const LIVE_SALES_SHOWN: usize = 50;

/// Reconciles every live sale (Redis still holds it; a sale's keys expire
/// after its end, payment window and margin), at most [`LIVE_SALES_SHOWN`], in key order. The
/// dashboard and the compensator's audit both watch these.
pub async fn reconcile_live(stock: &Stock, pool: &PgPool) -> Result<Vec<Report>, ReconcileError> {
    let redis = source::<crate::stock::conn::RedisCallError>("redis");
    let mut sales = stock.sales().await.map_err(&redis)?;
    sales.sort();
    let mut reports = Vec::new();
    for sale in sales {
        // Expired sales are skipped for one cheap read.
        if !stock.snapshot(sale).await.map_err(&redis)?.exists {
            continue;
        }
        match reconcile(stock, pool, None, sale, false).await {
            Ok(report) => reports.push(report),
            Err(ReconcileError::SaleNotFound(_)) => {}
            Err(error) => return Err(error),
        }
        if reports.len() == LIVE_SALES_SHOWN {
            break;
        }
    }
    Ok(reports)
}

impl Report {
    /// Units held: left in Redis, sold (awaiting payment or paid), and in
    /// flight. Equals `total_stock` when the books balance.
    pub fn balance(&self) -> i64 {
        self.redis_remaining + self.orders_created + self.orders_paid + self.orders_in_flight
    }

    /// Runs the checks again; with `require_drained`, anything still in
    /// flight is a violation too.
    pub fn judge(&mut self, require_drained: bool) {
        self.violations = check(self, require_drained);
        self.consistent = self.violations.is_empty();
    }
}

/// The invariant's checks, each violation naming its terms and figures.
pub fn check(r: &Report, require_drained: bool) -> Vec<String> {
    let mut violations = Vec::new();
    if let Some(warmup) = &r.unfinished_warmup {
        violations.push(format!(
            "warm-up {} is half done ({}): repeat it with the same id (warmupId, or seckillctl warmup --id {}) to finish it",
            warmup.warmup_id, warmup.step, warmup.warmup_id
        ));
    }
    if !r.redis.exists {
        violations.push("redis has no such sale (expired, never warmed, or Redis lost its data)".to_owned());
    } else if r.redis.total != r.total_stock || i64::from(r.round) != r.redis.round {
        violations.push(format!(
            "redis total/round {}/{} != postgresql total/round {}/{}",
            r.redis.total, r.redis.round, r.total_stock, r.round
        ));
    }
    let balance = r.balance();
    if balance != r.total_stock {
        violations.push(format!(
            "total_stock {} != redis_remaining {} + orders_created {} + orders_paid {} + orders_in_flight {} (= {balance}; redis off by {}){}",
            r.total_stock,
            r.redis_remaining,
            r.orders_created,
            r.orders_paid,
            r.orders_in_flight,
            balance - r.total_stock,
            match r.created_unknown_to_redis {
                Some(lost) if lost > 0 => format!(
                    "; {lost} CREATED or PAID orders are unknown to Redis: deductions it acknowledged and lost, whose units it counted again"
                ),
                _ => String::new(),
            }
        ));
    }
    if r.orders_created + r.orders_paid > r.total_stock {
        violations.push(format!(
            "oversold: orders_created {} + orders_paid {} > total_stock {}",
            r.orders_created, r.orders_paid, r.total_stock
        ));
    }
    if r.db_remaining != r.total_stock - r.orders_created - r.orders_paid {
        violations.push(format!(
            "db_remaining {} != total_stock {} - orders_created {} - orders_paid {}",
            r.db_remaining, r.total_stock, r.orders_created, r.orders_paid
        ));
    }
    if r.duplicate_users > 0 {
        violations.push(format!("duplicate_users {} > 0", r.duplicate_users));
    }
    if r.parked > 0 {
        violations.push(format!(
            "parked {} > 0: records no service could settle wait for an operator (seckillctl dlq parked)",
            r.parked
        ));
    }
    if r.orders_paid != r.payments_applied {
        violations.push(format!(
            "orders_paid {} != payments_applied {}: every PAID order was paid by one recorded payment",
            r.orders_paid, r.payments_applied
        ));
    }
    // A PAID or CANCELLED order was CREATED first: two events each.
    let expected_events = r.orders_created
        + r.orders_failed
        + 2 * (r.orders_paid + r.orders_cancelled)
        + r.orders_paid_late
        + r.refund_events;
    if r.events != expected_events {
        violations.push(format!(
            "order events {} != orders_created {} + orders_failed {} + 2 × (orders_paid {} + orders_cancelled {}) + orders_paid_late {} + refund_events {}: every order has one event per state, every refund due one",
            r.events, r.orders_created, r.orders_failed, r.orders_paid, r.orders_cancelled, r.orders_paid_late, r.refund_events
        ));
    }
    if r.returned != r.cancelled_accepted {
        violations
            .push(format!("returned {} != cancelled orders redis had accepted {}", r.returned, r.cancelled_accepted));
    }
    if r.compensated + r.written_off != r.failed_accepted {
        violations.push(format!(
            "compensated {} + written_off {} != failed orders redis had accepted {}",
            r.compensated, r.written_off, r.failed_accepted
        ));
    }
    if require_drained && !r.drained() {
        violations.push(format!(
            "not drained: orders_in_flight {}, order lag {:?}, compensator lag {:?}, events pending {}, cancels pending {}",
            r.orders_in_flight, r.order_lag, r.compensator_lag, r.events_pending, r.cancels_pending
        ));
    }
    violations
}
